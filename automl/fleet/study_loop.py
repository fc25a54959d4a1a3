"""The trial loop shared by `automl study start`, `automl serve --workers` and `automl worker`.

Optuna's storage is the queue: a loop starts a trial only while fewer than ``n_trials`` are
COMPLETE or RUNNING, so concurrent workers stop at exactly ``n_trials`` COMPLETE.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import optuna
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from automl.errors import Aborted, AutomlError, InputRefused, host_trouble
from automl.fleet.signals import GracefulStop  # also imported from here by its callers
from automl.fleet.tracking import tracker
from automl.inputs.data import cached_dataset
from automl.records import CONVERGED_ATTR, DATA_ROOT_ATTR, MODEL_METRICS, STOP_ATTR
from automl.search.budget import fail_cap, forgiven_failures, out_of_time
from automl.search.samplers import ScaledValuesSampler, make_sampler
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
    objective = StudyObjective(
        spec, artifact_store, threads, cache=stage_cache(settings),
        data_root=existing.user_attrs.get(DATA_ROOT_ATTR),
    )  # fmt: skip
    if stop is not None:
        objective.aborted = lambda: stop.aborted
    _check_inputs(existing, spec, objective)
    # A resumed study must not replay the draws of its first run: shift the seed by history.
    offset = sampler_offset + 1009 * len(existing.get_trials(deepcopy=False))
    seed = (spec.seed + offset) % (MAX_SEED + 1)
    sampler = make_sampler(spec.sampler, seed)
    logger.info("study %s: sampler %s, seed %d", name, spec.sampler, seed)
    if spec.trials_per_model > 1:
        stuck = [i for i, c in enumerate(spec.constraints) if c.metric in MODEL_METRICS]
        sampler = VariantSampler(  # the objective's space: variants obey the model's caps
            sampler, objective.space, spec.trials_per_model, spec.variant_startup_trials, seed,
            stuck,
        )  # fmt: skip
    sampler = ScaledValuesSampler(sampler, spec.objectives)
    study = optuna.load_study(study_name=name, storage=cached(storage), sampler=sampler)
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
            if stop is not None:
                stop.trial_begins(_mean_complete_s(study))
            try:
                study.optimize(
                    objective, n_trials=1, catch=(Exception,), callbacks=callbacks,
                    gc_after_trial=False,
                )  # fmt: skip
            finally:
                if stop is not None:
                    stop.trial_ends()
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
        AutomlError: This host cannot run it (a file missing here, no target, out of memory,
            a disk or file error): other hosts may, and this one may later.
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
        said = _first_line(e, objective.data_root)
        if host_trouble(e):
            logger.warning("study %s: checking its inputs raised %s", spec.name, said, exc_info=e)
            raise AutomlError(
                f"checking the inputs of study {spec.name!r} failed on this host ({said}); the "
                "study stays queued for other workers, and this one tries it again later"
            ) from e
        reason = (
            f"checking the inputs of study {spec.name!r} failed unexpectedly ({said}); the "
            "worker's log has the traceback. Check its dataset and model files, then submit "
            "it again"
        )
        logger.exception("study %s: checking its inputs raised %s", spec.name, type(e).__name__)
        refuse_study(study, reason)
        raise InputRefused(reason) from e


def _first_line(error: Exception, data_root: str | None) -> str:
    """``error``'s type and the first line of its message, without a REST submission's data
    root (its paths as the user gave them)."""
    said = (str(error).strip().splitlines() or [""])[0][:200]
    if data_root is not None:
        said = said.replace(f"{data_root.rstrip('/')}/", "")
    return f"{type(error).__name__}{': ' + said if said else ''}"


def _mean_complete_s(study: optuna.Study) -> float | None:
    """The mean duration of the study's COMPLETE trials (None before the first): read from
    the trial cache, which reads only the trials that are new since its last read."""
    states = (optuna.trial.TrialState.COMPLETE,)
    trials = study._storage.get_all_trials(study._study_id, deepcopy=False, states=states)
    spans = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in trials
        if t.datetime_complete is not None and t.datetime_start is not None
    ]
    return sum(spans) / len(spans) if spans else None


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
