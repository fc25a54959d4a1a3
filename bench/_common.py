"""Helpers shared by the benchmarks: throwaway storages and a quiet study run."""

from __future__ import annotations

import logging
from pathlib import Path

import optuna

from automl.settings import Settings
from automl.spec import parse_spec
from automl.storage import open_artifact_store, open_storage
from automl.studies import create_study
from automl.worker import run_study_loop


def run_study(workdir: Path, *, enqueue: list[dict] | None = None, cache: bool = True, **spec):
    """Run one study in ``workdir`` and return (study, settings) once it is done."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("automl").setLevel(logging.WARNING)
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        storage=f"sqlite:///{workdir}/bench.db",
        artifacts_dir=workdir / "artifacts",
        cache_enabled=cache,
    )
    storage = open_storage(settings.storage, settings)
    study = create_study(parse_spec(spec), storage)
    for params in enqueue or []:
        study.enqueue_trial(params)
    run_study_loop(
        study.study_name, storage, artifact_store=open_artifact_store(settings), settings=settings
    )
    return optuna.load_study(study_name=study.study_name, storage=storage), settings
