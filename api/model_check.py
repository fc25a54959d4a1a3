"""A submitted trained model, checked before the 201 in a child process.

The child (``python -m automl.trials.model_check``) loads the weights with
``weights_only=True``, builds the factory's model and fits them, finds its output layer,
exports it and scores it against chance on the study's data; the web process imports no torch.
A check that outlasts ``AUTOML_MODEL_CHECK_TIMEOUT_S`` (or waits that long for one of the
``CONCURRENT_CHECKS`` slots), or that crashes, is left to the worker, which fails the study with
the reason if the model is refused (``error`` in ``GET /v1/studies/{name}``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

from api.errors import ApiError

if TYPE_CHECKING:
    from automl.search.spec import StudySpec
    from automl.settings import Settings

logger = logging.getLogger("api.model_check")
# Each check is a process that imports torch: a few at a time, whatever the clients send.
CONCURRENT_CHECKS = 2
_slots = threading.BoundedSemaphore(CONCURRENT_CHECKS)


def check_model(spec: StudySpec, settings: Settings) -> None:
    """Run the trained model's check of ``spec`` (paths under the data root) in a child.

    Raises:
        ApiError: 422 naming ``model`` and why it is refused (its paths are scrubbed with the
            other errors').
    """
    deadline = time.monotonic() + settings.model_check_timeout_s
    if not _slots.acquire(timeout=settings.model_check_timeout_s):
        return _left_to_worker(spec, "found no free slot")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "automl.trials.model_check"],
            input=spec.model_dump_json(), capture_output=True, text=True,
            timeout=max(deadline - time.monotonic(), 1.0),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return _left_to_worker(spec, "ran out of time")
    finally:
        _slots.release()
    if done.returncode == 2:  # the model is refused, and the check says why
        raise ApiError(422, "invalid_spec", done.stdout.strip(), field="model")
    if done.returncode != 0:  # the check itself broke (killed, out of memory): not the model
        tail = done.stderr.strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        _left_to_worker(spec, f"failed ({tail[0]})")


def _left_to_worker(spec: StudySpec, why: str) -> None:
    logger.warning(
        "study %s: its model's check %s within AUTOML_MODEL_CHECK_TIMEOUT_S; the first worker "
        "checks it before any trial",
        spec.name, why,
    )  # fmt: skip
