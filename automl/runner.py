"""Running a study on this machine: K local worker processes and a live progress display."""

from __future__ import annotations

import multiprocessing
from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from automl.render import front_table
from automl.settings import get_settings
from automl.storage import open_artifact_store, open_storage
from automl.studies import count_states, load, pareto_front
from automl.worker import GracefulStop, run_study_loop

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage
    from rich.console import Console


def run_local(
    name: str, storage: BaseStorage, *, storage_url: str | None, jobs: int, console: Console
) -> None:
    """Run study ``name`` with ``jobs`` processes; Ctrl-C stops after the running trials.

    Args:
        name: The study, already created.
        storage: Its storage.
        storage_url: The URL, for the extra worker processes.
        jobs: Worker processes in all (this one included).
        console: Where progress and the final front go.
    """
    settings = get_settings()
    url = storage_url or settings.storage
    stop = GracefulStop().install()
    context = multiprocessing.get_context("spawn")
    helpers = [
        context.Process(target=_worker_process, args=(name, url, index), daemon=False)
        for index in range(1, jobs)
    ]
    for process in helpers:
        process.start()
    _, spec = load(name, storage)
    with _progress(console) as progress:
        task = progress.add_task(name, total=spec.n_trials, status="starting")

        def refresh(study: optuna.Study) -> None:
            _update(progress, task, study)

        refresh(load(name, storage)[0])
        result = run_study_loop(
            name, storage, artifact_store=open_artifact_store(settings), settings=settings,
            stop=stop, on_trial_end=refresh,
        )  # fmt: skip
        for process in helpers:
            if stop.requested:  # `kill` reaches this process only: pass it on
                process.terminate()
            process.join()
        refresh(load(name, storage)[0])
    console.print(f"Study {name} ended: {result.reason}.")
    console.print(front_table(pareto_front(name, storage), spec))


def _worker_process(name: str, url: str, index: int) -> None:
    settings = get_settings()
    run_study_loop(
        name,
        open_storage(url, settings),
        artifact_store=open_artifact_store(settings),
        settings=settings,
        stop=GracefulStop().install(),
        sampler_offset=index,
    )


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )


def _update(progress: Progress, task: int, study: optuna.Study) -> None:
    trials = study.get_trials(deepcopy=False)
    counts = count_states(trials)
    front = study.best_trials
    best = max(front, key=lambda t: t.user_attrs.get("accuracy", 0.0), default=None)
    status = f"failed {counts['FAIL']}  running {counts['RUNNING']}  front {len(front)}"
    if best is not None:
        status += (
            f"  best acc {best.user_attrs['accuracy']:.3f}"
            f" @ {best.user_attrs['latency_per_sample_ms']:.4f} ms/sample"
        )
    progress.update(task, completed=counts["COMPLETE"], status=status)
