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


class CheckNotRun(Exception):
    """A check in a child found no free slot, or ran out of time."""


def run_check(
    module: str, *args: str, stdin: str = "", timeout_s: float
) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` in a child, in one of the :data:`CONCURRENT_CHECKS` slots,
    within ``timeout_s`` (the wait for a slot included).

    Raises:
        CheckNotRun: No slot freed up, or the child ran out of time (it is killed).
    """
    deadline = time.monotonic() + timeout_s
    if not _slots.acquire(timeout=timeout_s):
        raise CheckNotRun("found no free slot")
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *args], input=stdin, capture_output=True, text=True,
            timeout=max(deadline - time.monotonic(), 1.0),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise CheckNotRun("ran out of time") from None
    finally:
        _slots.release()


def check_model(spec: StudySpec, settings: Settings) -> None:
    """Run the trained model's check of ``spec`` (paths under the data root) in a child.

    Raises:
        ApiError: 422 naming ``model`` and why it is refused (its paths are scrubbed with the
            other errors').
    """
    try:
        done = run_check(
            "automl.trials.model_check", stdin=spec.model_dump_json(),
            timeout_s=settings.model_check_timeout_s,
        )  # fmt: skip
    except CheckNotRun as e:
        return _left_to_worker(spec, str(e))
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
