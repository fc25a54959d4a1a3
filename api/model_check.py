"""A submitted trained model, checked before the 201 in a child process.

The child (``python -m automl.trials.model_check``) loads the weights with
``weights_only=True``, builds the factory's model and fits them, finds its output layer,
exports it and scores it against chance on the study's data; the web process imports no torch.
A check that outlasts ``AUTOML_MODEL_CHECK_TIMEOUT_S`` is left to the worker, which fails the
study with the reason if the model is refused (``error`` in ``GET /v1/studies/{name}``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import TYPE_CHECKING

from api.errors import ApiError

if TYPE_CHECKING:
    from automl.search.spec import StudySpec
    from automl.settings import Settings

logger = logging.getLogger("api.model_check")


def check_model(spec: StudySpec, settings: Settings) -> None:
    """Run the trained model's check of ``spec`` (paths under the data root) in a child.

    Raises:
        ApiError: 422 naming ``model`` and why it is refused, paths shown as given.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-m", "automl.trials.model_check"],
            input=spec.model_dump_json(), capture_output=True, text=True,
            timeout=settings.model_check_timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        logger.warning(
            "study %s: its model's check took over %g s (AUTOML_MODEL_CHECK_TIMEOUT_S); the "
            "worker checks it before the first trial",
            spec.name, settings.model_check_timeout_s,
        )  # fmt: skip
        return
    if done.returncode == 0:
        return
    said = done.stdout.strip() if done.returncode == 2 else _last_line(done.stderr)
    root = f"{settings.data_root.resolve()}/"
    raise ApiError(422, "invalid_spec", said.replace(root, ""), field="model")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return f"the model's check failed: {lines[-1] if lines else 'no output'}"
