"""The trial loop shared by `automl study start`, `automl serve --workers` and `automl worker`.

Optuna's storage is the queue: a loop starts a trial only while fewer than ``n_trials`` are
COMPLETE or RUNNING, so concurrent workers stop at exactly ``n_trials`` COMPLETE.
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from automl.errors import Aborted, AutomlError, InputRefused
from automl.fleet.tracking import tracker
from automl.inputs.data import cached_dataset
from automl.records import CONVERGED_ATTR, DATA_ROOT_ATTR, MODEL_METRICS, STOP_ATTR
from automl.search.budget import fail_cap, forgiven_failures, out_of_time
from automl.search.samplers import ScaledValuesSampler, make_sampler
from automl.search.space import load_space
from automl.search.spec import MAX_SEED
from automl.search.variants import VariantSampler
from automl.service.fingerprints import check_fingerprint
from automl.service.studies import load, refuse_study, state_counts
from automl.storage.factory import cached
from automl.storage.reaper import reap_stale_trials
from automl.trials.objective import StudyObjective
from automl.trials.stage_cache import stage_cache

if TYPE_CHECKING:
    from collections.abc import Callable

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

    from automl.search.spec import StudySpec
    from automl.settings import Settings

logger = logging.getLogger("automl.fleet.study_loop")
WAITING_ON_OTHERS = "waiting-on-others"  # other workers hold the remaining trials
# What the database driver raises when the server cannot be reached (DB-API's OperationalError).
_CONNECTION_ERRORS = (OperationalError, InterfaceError, DisconnectionError, PoolTimeout)


class GracefulStop:
    """SIGINT/SIGTERM ask the loop to stop after the running trial; a second SIGINT aborts.

    Signals that arrive during one long C call (loading torch, say) reach the Python handler as
    one call. The C handler writes one byte per signal to the wakeup pipe, so presses are counted
    from it, and a second Ctrl-C is never taken for the first. SIGUSR1 aborts at once: a parent
    passes its second Ctrl-C on to its helper processes that way.

    A handler may run inside a weakref callback or a ``__del__`` (SQLAlchemy has them), where
    Python swallows what it raises. An abort swallowed there is raised again, at once, in the
    code that the callback interrupted.
    """

    def __init__(self) -> None:
        self.requested = False
        self.interrupted = False  # by Ctrl-C, not only by SIGTERM
        self.aborted = False
        self.helpers: list[int] = []  # pids told of a stop (SIGTERM) and an abort (SIGUSR1)
        self._calls = 0  # SIGINT handler calls
        self._bytes = 0  # SIGINT bytes read from the wakeup pipe
        self._pipe: tuple[int, int, int] | None = None  # read end, write end, previous fd
        self._previous: dict[int, object] = {}
        self._previous_hook = sys.unraisablehook
        self._reraise = False  # a swallowed abort waits to be raised again

    def install(self, *, sigint: bool = True) -> GracefulStop:
        """Install the handlers (main thread only).

        Args:
            sigint: Handle Ctrl-C; helper processes leave it ignored and follow their parent.

        Returns:
            This stop.
        """
        signums = [signal.SIGTERM, signal.SIGUSR1] + ([signal.SIGINT] if sigint else [])
        self._previous = {signum: signal.signal(signum, self._handle) for signum in signums}
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        self._pipe = (read, write, signal.set_wakeup_fd(write, warn_on_full_buffer=False))
        # Optuna logs an aborted trial with the traceback of the KeyboardInterrupt.
        logging.getLogger("optuna.study._optimize").addFilter(self._quiet_after_abort)
        self._previous_hook, sys.unraisablehook = sys.unraisablehook, self._swallowed
        return self

    def uninstall(self) -> None:
        """Restore what :meth:`install` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._pipe is not None:
            read, write, previous_fd = self._pipe
            signal.set_wakeup_fd(previous_fd)
            os.close(read)
            os.close(write)
            self._pipe = None
        logging.getLogger("optuna.study._optimize").removeFilter(self._quiet_after_abort)
        sys.unraisablehook = self._previous_hook

    def _handle(self, signum: int, _frame: object) -> None:
        if self._reraise:
            self._reraise = False
            raise Aborted
        seen = max(self._calls, self._bytes)
        self._calls += signum == signal.SIGINT
        self._bytes += self._read_wakeups().count(signal.SIGINT)
        presses = max(self._calls, self._bytes) - seen  # not yet acted on
        if presses:
            self.interrupted = True
        if signum == signal.SIGTERM or (presses and seen == 0):
            self._request("Ctrl-C" if presses else "SIGTERM")
        if signum == signal.SIGUSR1 and not self.aborted:  # the parent may tell twice
            self._abort("aborting: the parent process was interrupted")
        if presses and seen + presses >= 2:
            self._abort("second Ctrl-C: aborting; the running trial is marked FAIL")

    def _read_wakeups(self) -> bytes:
        if self._pipe is None:
            return b""
        chunks = []
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._pipe[0], 512):
                chunks.append(chunk)
        return b"".join(chunks)

    def _request(self, by: str) -> None:
        if self.requested:
            return
        self.requested = True
        self._tell_helpers(signal.SIGTERM)
        again = " (Ctrl-C again aborts it)" if by == "Ctrl-C" else ""
        logger.warning(
            "stop requested by %s: finishing the running trial, then exiting%s", by, again
        )

    def _abort(self, message: str) -> None:
        self.aborted = True
        self._tell_helpers(signal.SIGUSR1)
        logger.warning(message)
        raise Aborted

    def _swallowed(self, unraisable: sys.UnraisableHookArgs) -> None:
        if not isinstance(unraisable.exc_value, Aborted):
            self._previous_hook(unraisable)
            return
        # Raising here would be swallowed too: a thread trips the handler once this returns.
        self._reraise = True
        timer = threading.Timer(0.01, _thread.interrupt_main, (signal.SIGUSR1,))
        timer.daemon = True
        timer.start()

    def _tell_helpers(self, signum: int) -> None:
        for pid in self.helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    def _quiet_after_abort(self, _record: logging.LogRecord) -> bool:
        return not self.aborted


@dataclass
class LoopResult:
    """What one loop did and why it ended."""

    ran: int
    reason: str


def run_study_loop(
    name: str,
    storage: BaseStorage,
    *,
    artifact_store: FileSystemArtifactStore,
    settings: Settings,
    stop: GracefulStop | None = None,
    max_trials: int | None = None,
    threads: int = 1,
    sampler_offset: int = 0,
    poll_s: float = 1.0,
    wait: bool = True,
    on_trial_end: Callable[[optuna.Study], None] | None = None,
) -> LoopResult:
    """Run trials of study ``name`` until it is done, stopped, timed out or out of budget.

    Args:
        name: The study.
        storage: Its storage.
        artifact_store: Where trial models go.
        settings: Cache and related settings.
        stop: Signal-driven stop flag.
        max_trials: Trials this loop may run at most.
        threads: Torch threads for training.
        sampler_offset: Added to the spec's seed, so that parallel workers draw differently.
        poll_s: Wait between checks while other workers hold the remaining trials.
        wait: Wait while other workers hold the remaining trials (one of them may die and
            leave a retry); otherwise return at once, to serve another study meanwhile.
        on_trial_end: Called after each trial, e.g. to refresh a progress display.

    Returns:
        How many trials this loop ran and why it stopped.

    Raises:
        TargetUnavailable: This host cannot measure the study's target: before any trial, or
            in a trial, which is then FAIL with that reason. The loop stops there rather than
            fail every trial of a shared study from one broken host.
    """
    _quiet_known_failures()
    existing, spec = load(name, storage)
    # A resumed study must not replay the draws of its first run: shift the seed by history.
    offset = sampler_offset + 1009 * len(existing.get_trials(deepcopy=False))
    seed = (spec.seed + offset) % (MAX_SEED + 1)
    sampler = make_sampler(spec.sampler, seed)
    logger.info("study %s: sampler %s, seed %d", name, spec.sampler, seed)
    if spec.trials_per_model > 1:
        space = load_space(spec.search_space)
        stuck = [i for i, c in enumerate(spec.constraints) if c.metric in MODEL_METRICS]
        sampler = VariantSampler(
            sampler, space, spec.trials_per_model, spec.variant_startup_trials, seed, stuck
        )
    sampler = ScaledValuesSampler(sampler, spec.objectives)
    study = optuna.load_study(study_name=name, storage=cached(storage), sampler=sampler)
    objective = StudyObjective(
        spec, artifact_store, threads, cache=stage_cache(settings),
        data_root=existing.user_attrs.get(DATA_ROOT_ATTR),
    )  # fmt: skip
    if stop is not None:
        objective.aborted = lambda: stop.aborted
    _check_inputs(existing, spec, objective)
    callbacks = tracker(settings.mlflow_uri, spec)
    ran, outage_s, waiting = 0, 0.0, False
    while True:
        objective.trial_id = None  # set by the objective once a trial reaches it
        try:
            reason = _stop_reason(study, spec, stop, ran, max_trials)
            if reason == WAITING_ON_OTHERS and wait:
                if not waiting:
                    _say_waiting(name, settings)
                waiting = True
                time.sleep(poll_s)
                continue
            waiting = False
            if reason:
                return LoopResult(ran=ran, reason=reason)
            logger.info("study %s: starting a trial on %s", name, spec.target)
            study.optimize(
                objective, n_trials=1, catch=(Exception,), callbacks=callbacks,
                gc_after_trial=False,
            )  # fmt: skip
            if stop is not None and stop.aborted:  # an abort that a library turned into an error
                raise Aborted
            if objective.unavailable is not None:  # every trial here would fail: stop this loop
                raise objective.unavailable
        except Exception as e:
            if _reaped_while_running(storage, objective.trial_id, e):
                ran += 1
                continue
            if not storage_unreachable(e):
                raise
            # The trial being told (if any) stays RUNNING; the reaper fails and retries it.
            outage_s = min(max(2 * outage_s, 1.0), 30.0)
            logger.warning(
                "storage unreachable (%s); retrying in %.0f s", type(_unmasked(e)).__name__,
                outage_s,
            )  # fmt: skip
            time.sleep(outage_s)
            continue
        ran, outage_s = ran + 1, 0.0
        if on_trial_end is not None:
            on_trial_end(study)


def _check_inputs(study: optuna.Study, spec: StudySpec, objective: StudyObjective) -> None:
    """Check the study's inputs before its first trial here.

    Raises:
        InputRefused: They are wrong wherever the study runs, or the check itself failed
            unexpectedly (a crafted file can make a library raise anything): the study is
            refused with the reason, so that no worker takes it again and every view says why.
        AutomlError: This host cannot run it (a file missing here, no target): other hosts may.
    """
    try:
        objective.check_inputs()
        check_fingerprint(
            study, spec, cached_dataset(**spec.data_args).fingerprint,
            objective.model_fingerprint,
        )  # fmt: skip
    except InputRefused as e:  # wrong on every worker: the study fails, and says why
        refuse_study(study, str(e))
        raise
    except AutomlError:
        raise
    except Exception as e:
        if storage_unreachable(e):
            raise
        said = (str(e).strip().splitlines() or [""])[0][:200]
        if objective.data_root is not None:  # a REST submission's paths, as it gave them
            said = said.replace(f"{objective.data_root.rstrip('/')}/", "")
        reason = (
            f"checking the inputs of study {spec.name!r} failed unexpectedly ({type(e).__name__}"
            f"{': ' + said if said else ''}); the worker's log has the traceback. Check its "
            "dataset and model files, then submit it again"
        )
        logger.exception("study %s: checking its inputs raised %s", spec.name, type(e).__name__)
        refuse_study(study, reason)
        raise InputRefused(reason) from e


class _KnownFailureFilter(logging.Filter):
    """Drops the traceback from Optuna's "Trial N failed" line when automl raised the error:
    its message says what went wrong (and the trial's ``fail_reason`` keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], AutomlError):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_known_failures() -> None:
    """Install :class:`_KnownFailureFilter` on the logger of Optuna's trial loop, once."""
    optimize_logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _KnownFailureFilter) for f in optimize_logger.filters):
        optimize_logger.addFilter(_KnownFailureFilter())


def storage_unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the storage could not be reached: a connection error.

    That is an operational error of the database driver (the server is down or restarting, the
    connection dropped, a SQLite file is locked), raised as is or wrapped by Optuna in a
    ``StorageInternalError`` (``from`` it). A programming error (an ``UnboundLocalError``, a
    ``ProgrammingError``) is not one, even while handling one; except Optuna's own: see
    :func:`_unmasked`.
    """
    seen: BaseException | None = _unmasked(error)
    while seen is not None:
        if isinstance(seen, _CONNECTION_ERRORS) or getattr(seen, "connection_invalidated", False):
            return True
        if not isinstance(seen, optuna.exceptions.StorageInternalError):
            return False
        seen = seen.__cause__
    return False


def _unmasked(error: BaseException) -> BaseException:
    """The error that Optuna's trial loop hid behind an ``UnboundLocalError`` of its own.

    When telling a trial fails and reading it back fails too (the storage went down), the
    ``finally`` block of Optuna's ``_run_trial`` reads a variable that was never set; the
    failure it was handling is the ``UnboundLocalError``'s context.
    """
    if not isinstance(error, UnboundLocalError) or error.__context__ is None:
        return error
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    frame = None if tb is None else tb.tb_frame
    where = None if frame is None else (frame.f_globals.get("__name__"), frame.f_code.co_name)
    if where == ("optuna.study._optimize", "_run_trial"):
        return error.__context__
    return error


def _reaped_while_running(storage: BaseStorage, trial_id: int | None, error: Exception) -> bool:
    """Whether ``error`` came from telling a trial that another process already failed.

    That happens when the trial's heartbeats stopped reaching the storage for longer than the
    grace period: a reaper failed it (and queued its retry) while it still ran here.
    """
    if trial_id is None or not isinstance(
        error, (ValueError, optuna.exceptions.UpdateFinishedTrialError)
    ):
        return False
    try:
        trial = storage.get_trial(trial_id)
    except (optuna.exceptions.StorageInternalError, SQLAlchemyError):  # still unreachable
        return False
    if trial.state != optuna.trial.TrialState.FAIL:
        return False
    logger.warning(
        "trial %d was failed by a reaper while it ran here (its heartbeat had lapsed); "
        "its result is dropped and its retry runs instead", trial.number,
    )  # fmt: skip
    return True


def _say_waiting(name: str, settings: Settings) -> None:
    """Say what a loop waits for, and for how long at most."""
    logger.info(
        "study %s: waiting for its last trials, which other workers are running; should one of "
        "them have died, its trial is failed and retried here once its heartbeat is %d s old "
        "(AUTOML_GRACE_PERIOD_S)",
        name, settings.grace_period_s,
    )  # fmt: skip


def _stop_reason(study, spec, stop, ran, max_trials) -> str | None:
    if stop is not None and stop.requested:
        return "signal"
    attrs = study._storage.get_study_user_attrs(study._study_id)
    if attrs.get(STOP_ATTR):
        return "stopped"
    if attrs.get(CONVERGED_ATTR):
        return "converged"
    if max_trials is not None and ran >= max_trials:
        return "max-trials"
    counts, first_start = state_counts(study._storage, study._study_id)
    if out_of_time(spec, first_start):  # timeout_s counts from the study's first trial
        return "timeout"
    if counts["FAIL"] >= fail_cap(spec, forgiven_failures(attrs)):
        return "too-many-failures"
    if spec.n_trials is None:
        return None
    if counts["COMPLETE"] >= spec.n_trials:
        return "done"
    if counts["COMPLETE"] + counts["RUNNING"] >= spec.n_trials:
        # Each trial's optimize() reaps too; a waiting loop must not wait on a dead worker.
        reap_stale_trials(study)
        return WAITING_ON_OTHERS
    return None
