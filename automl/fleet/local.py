"""Running a study on this machine: K local worker processes and a live progress display."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shlex
import signal
import sys
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState
from sqlalchemy.engine import make_url

from automl.errors import TargetUnavailable
from automl.fleet.progress_line import Status, refreshing
from automl.fleet.study_loop import GracefulStop, LoopResult, run_study_loop
from automl.hosts import worker_name
from automl.progress import rich_progress
from automl.records import FAIL_REASON, WORKER
from automl.report.tables import front_table
from automl.service.read import empty_front_reason, pareto_front
from automl.service.studies import load
from automl.settings import get_settings
from automl.storage.factory import open_artifact_store, open_storage
from automl.targets import load_target
from automl.targets.gpus import list_gpus, pin_this_process, worker_environment
from automl.targets.presence import serves_any
from automl.trials.objective import INTERRUPTED

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from multiprocessing.process import BaseProcess
    from pathlib import Path

    from optuna.storages import BaseStorage
    from rich.console import Console

    from automl.search.spec import StudySpec

UNAVAILABLE = "unavailable-here"  # job 0 could not measure; its helpers ran the study on
_ENDINGS = {
    "interrupted": "stopped by Ctrl-C after its running trial",
    "signal": "stopped by SIGTERM after its running trial",
    "aborted": "aborted by a second SIGTERM: a trial it interrupted is marked FAIL (interrupted)",
    "stopped": "stopped by `automl study stop`",
    "too-many-failures": "too many failed trials",
    "converged": "converged: its last trials in a row were all screened out",
    UNAVAILABLE: "run by the other jobs (job 0 could not measure its target)",
}


def run_here(
    specs: list[StudySpec],
    storage: BaseStorage,
    *,
    storage_url: str | None,
    jobs: int,
    console: Console,
    after: Callable[[str, BaseStorage], None] | None = None,
    verbose: bool = False,
    artifacts_dir: Path | None = None,
) -> int:
    """Run the studies of ``specs`` here in turn, as ``automl study start`` does.

    A stop by Ctrl-C or SIGTERM ends the run with the commands that resume its studies.
    Each process gets one of the host's GPUs, round-robin (see :mod:`automl.targets.gpus`); this
    one, process 0, is pinned to the first before it runs a trial.

    Args:
        specs: The studies, already created.
        storage: Their storage.
        storage_url: The URL given on the command line, if any.
        jobs: Worker processes in all (this one included).
        console: Where progress, fronts and messages go.
        after: Called with the name of each study that ran to its end.
        verbose: Keep Optuna's own INFO lines (each trial's params); by default the progress
            line, or one line per finished trial where there is no terminal, tells the story.
        artifacts_dir: The ``--artifacts-dir`` given on the command line, if any: the resume
            commands repeat it.

    Returns:
        The exit code: 130 after Ctrl-C (one press or two), 1 when a study ended on too many
        failures, 3 when this process could not measure a study's target while other jobs ran
        it on, else 0. Once Ctrl-C has ended the run, SIGINT is ignored: the process is on
        its way out, and Python restores the default action (death by SIGINT) while it
        finalizes.
    """
    if not verbose:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar tells the story
    # Assigned once, before this process is pinned: pinning changes what it would inherit.
    gpus = list_gpus()
    accepts = serves_any([load_target(s.target) for s in specs])  # the studies' GPUs only
    environments = [worker_environment(index, gpus, accepts=accepts) for index in range(jobs)]
    pin_this_process(environments[0])  # no trial has run here yet, so CUDA has not read it
    code = 0
    for index, spec in enumerate(specs):
        resume = [
            resume_command(s.name, storage_url, jobs, artifacts_dir=artifacts_dir)
            for s in specs[index:]
        ]
        try:
            ended = run_local(
                spec.name, storage, storage_url=storage_url, environments=environments,
                console=console,
            )  # fmt: skip
            if ended.reason in ("interrupted", "signal", "aborted"):
                if ended.reason == "interrupted":
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                for command in resume:
                    console.print(f"Resume with: {command}", highlight=False)
                return 130 if ended.reason == "interrupted" else 0
            if ended.reason == UNAVAILABLE:
                code = 3  # as TargetUnavailable exits, once the other jobs have ended
            elif ended.reason == "too-many-failures":
                code = 1
                console.print(
                    f"`automl study show {spec.name}` lists the failures and their reasons; "
                    f"once fixed, resume with: {resume[0]} --retry-failed",
                    highlight=False,
                )
            elif after is not None:
                after(spec.name, storage)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            console.print(
                "aborted by Ctrl-C: a trial it interrupted is marked FAIL (interrupted); "
                f"resume with: {'; '.join(resume)}",
                highlight=False,
            )
            return 130
    return code


def resume_command(
    name: str,
    storage_url: str | None,
    jobs: int = 1,
    *,
    detach: bool = False,
    artifacts_dir: Path | None = None,
) -> str:
    """The command that resumes study ``name`` (``detach``: for workers elsewhere), with the
    ``--storage`` and ``--artifacts-dir`` that were given; a storage password is shown as ***."""
    command = f"automl study start --name {shlex.quote(name)}"
    if storage_url is not None:
        shown = make_url(storage_url).render_as_string(hide_password=True)
        command += f" --storage {shlex.quote(shown)}"
    if artifacts_dir is not None:
        command += f" --artifacts-dir {shlex.quote(str(artifacts_dir))}"
    return command + (f" --jobs {jobs}" if jobs > 1 else "") + (" --detach" if detach else "")


def run_local(
    name: str,
    storage: BaseStorage,
    *,
    storage_url: str | None,
    environments: Sequence[Mapping[str, str]],
    console: Console,
) -> LoopResult:
    """Run study ``name`` with one process per environment, then print how it ended and its front.

    A first Ctrl-C (or SIGTERM) lets every process finish its running trial. A second one
    aborts them all at once: Optuna marks their trials FAIL, and the interrupt propagates
    (Ctrl-C) or ends the run as ``aborted`` (SIGTERM).

    Args:
        name: The study, already created.
        storage: Its storage.
        storage_url: The URL, for the extra worker processes.
        environments: One per worker process, this one's first (already applied here): the
            variables each helper sets before it runs (its GPU, see
            :func:`automl.targets.gpus.worker_environment`).
        console: Where progress and the final front go.

    Returns:
        What this process ran, and why it ended: ``interrupted`` once Ctrl-C was pressed,
        ``aborted`` after a second SIGTERM.

    Raises:
        KeyboardInterrupt: A second Ctrl-C (:class:`automl.errors.Aborted`).
    """
    settings = get_settings()
    study, spec = load(name, storage)
    stop = GracefulStop().install(sigterm_aborts=True)
    helpers: list[BaseProcess] = []
    try:
        helpers = _start_helpers(name, storage_url or settings.storage, environments[1:], stop)
        with rich_progress(console) as progress:
            task = progress.add_task(name, total=spec.n_trials, status="starting")
            with refreshing(progress, task, Status(study, spec.n_trials)):
                result = _loop_here(name, storage, stop, helpers, console)
                for process in helpers:
                    if stop.requested:  # a stop that came before they could be told
                        process.terminate()
                    process.join()
    except KeyboardInterrupt:
        _abort_helpers(helpers)
        _fail_abandoned(storage, study._study_id, helpers)
        if stop.interrupted:
            raise
        console.print(f"Study {name} ended: {_ENDINGS['aborted']}.", highlight=False)
        return LoopResult(ran=0, reason="aborted")
    finally:
        stop.uninstall()
    reason = "interrupted" if stop.interrupted else result.reason
    console.print(f"Study {name} ended: {_ENDINGS.get(reason, reason)}.")
    front = pareto_front(name, storage)
    if front:
        console.print(front_table(front, spec))
    else:
        console.print(empty_front_reason(name, storage), style="yellow", highlight=False)
    return LoopResult(ran=result.ran, reason=reason)


def _loop_here(
    name: str,
    storage: BaseStorage,
    stop: GracefulStop,
    helpers: list[BaseProcess],
    console: Console,
) -> LoopResult:
    """This process's loop (job 0). Where it cannot measure the target while helpers run, it
    says so and leaves the study to them, as a helper that cannot measure does.

    Raises:
        TargetUnavailable: It cannot measure, and no helper runs.
    """
    settings = get_settings()
    try:
        return run_study_loop(
            name, storage, artifact_store=open_artifact_store(settings), settings=settings,
            stop=stop,
        )  # fmt: skip
    except TargetUnavailable as e:
        if not helpers:
            raise
        console.print(f"error: job 0: {e}; the other jobs go on", highlight=False)
        return LoopResult(ran=0, reason=UNAVAILABLE)  # its trials are in the study, as FAIL


def _start_helpers(
    name: str, url: str, environments: Sequence[Mapping[str, str]], stop: GracefulStop
) -> list[BaseProcess]:
    """Start one helper process per environment, ignoring Ctrl-C, and tell ``stop`` about them.

    A terminal sends Ctrl-C to every process of its foreground group; this process passes each
    press on (see :class:`GracefulStop`), so helpers must not count it a second time. They
    inherit SIGINT ignored; it is blocked meanwhile, so that a press reaches this process later.
    """
    context = multiprocessing.get_context("spawn")
    helpers = [
        context.Process(
            target=_worker_process, args=(name, url, index, dict(environment)), daemon=False
        )
        for index, environment in enumerate(environments, start=1)
    ]
    if not helpers:
        return helpers
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for process in helpers:
            process.start()
        stop.helpers = [process.pid for process in helpers]
    finally:
        signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return helpers


def _abort_helpers(helpers: list[BaseProcess], grace_s: float = 60.0) -> None:
    """End the helpers after a second Ctrl-C: abort their trials, kill one that hangs."""
    for process in helpers:
        if process.is_alive():  # the stop told them already, unless the interrupt came elsewhere
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGUSR1)
    for process in helpers:
        process.join(grace_s)
        if process.is_alive():
            process.kill()
            process.join()


def _fail_abandoned(storage: BaseStorage, study_id: int, helpers: list[BaseProcess]) -> None:
    """Mark FAIL the trials that aborted helpers left RUNNING.

    An abort raised while torch runs Python from C++ ends a helper with ``std::terminate``,
    before Optuna can mark its trial; the trials say which process ran them.
    """
    ours = {worker_name(process.pid) for process in helpers}
    running = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
    for trial in running:
        if trial.user_attrs.get(WORKER) in ours:
            storage.set_trial_user_attr(trial._trial_id, FAIL_REASON, INTERRUPTED)
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)


def _worker_process(name: str, url: str, index: int, environment: dict[str, str]) -> None:
    os.environ.update(environment)  # first: CUDA reads its GPU when it initialises
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # ignored: the parent passes it on
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the parent's progress line tells
    settings = get_settings()
    try:
        run_study_loop(
            name,
            open_storage(url, settings),
            artifact_store=open_artifact_store(settings),
            settings=settings,
            stop=GracefulStop().install(sigint=False),
            sampler_offset=index,
        )
    except KeyboardInterrupt:  # the parent was aborted: Optuna has marked the trial FAIL
        return
    except TargetUnavailable as e:  # this process's GPU cannot measure; the others go on
        sys.stderr.write(f"error: job {index}: {e}\n")
