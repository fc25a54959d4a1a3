"""Re-measuring the latency of a study's Pareto trials, e.g. after a noisy run, or to decide
a latency budget on more runs than a trial takes."""

from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from automl.inputs.data import cached_dataset
from automl.metrics import REGISTRY
from automl.pipeline.latency import latency_stats, ort_run_timer
from automl.pipeline.latency_decision import (
    LATENCY_METRICS,
    decide_all,
    quantile_interval,
    sample_until_decided,
)
from automl.records import ARTIFACT_ID
from automl.service.exports import ModelMissing, missing_model
from automl.service.read import pareto_front
from automl.service.studies import load
from automl.settings import get_settings
from automl.targets import load_target
from automl.targets.gpus import measurement_lock
from automl.trials.deployment import Deployment
from automl.trials.stage_cache import stage_cache
from automl.trials.trial import engine_folder

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

    from automl.pipeline.latency_decision import Budget
    from automl.settings import Settings

REMEASURED_ATTR = "remeasured_front"
_MIN_RUNS = 200
_REL_CI = 0.01  # the median's 95% half-width, as a fraction of it


def remeasure_front(
    name: str,
    storage: BaseStorage,
    artifact_store: FileSystemArtifactStore,
    *,
    budgets: Sequence[Budget] | None = None,
    max_seconds: float = 5.0,
    settings: Settings | None = None,
) -> dict[int, dict]:
    """Measure every front trial's model again, one after the other, until its budgets are decided.

    Each model gets at least 200 timed runs, then more until the median's 95% interval is
    within ±1 % and every latency budget is decided (see
    :func:`automl.pipeline.latency_decision.sample_until_decided`), or ``max_seconds`` pass.
    Finished trials cannot change, so the records go into the study user attr
    ``remeasured_front`` (trial number → record), replacing the last re-measurement.

    Args:
        name: The study.
        storage: Its storage.
        artifact_store: Where its models are.
        budgets: Budgets to decide; None for the study's constraints. Those on other metrics
            than latency are left out.
        max_seconds: Cap on each model's timed runs.
        settings: Whose stage cache holds the trials' TensorRT engines; the environment's by
            default.

    Returns:
        By trial number: the latency statistics of the new runs (``p50_ms``… ``runs``), the
        first measurement's ``first_p50_ms``, ``first_p99_ms`` and ``first_runs``,
        ``intervals`` (each registered latency quantile in ms per batch, ``latency_p50_ms``…,
        with its 95% interval), ``decisions`` (one per budget, in order), ``stop``
        (``decided`` or ``cap``), ``converged`` (the median's interval target was reached) and
        ``env``.

    Raises:
        TargetUnavailable: This machine does not have the study's target.
    """
    from optuna.artifacts import download_artifact
    from optuna.artifacts.exceptions import ArtifactNotFound

    study, spec = load(name, storage)
    target = load_target(spec.target)
    data = cached_dataset(**spec.data_args)
    # Where the trials' TensorRT engines are; a reader creates no cache where none is used.
    cache = stage_cache(settings or get_settings()) if target.kind == "cuda" else None
    kept = [
        b for b in (spec.constraints if budgets is None else budgets) if b.metric in LATENCY_METRICS
    ]
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="automl-remeasure-") as workdir:
        for record in pareto_front(name, storage):
            path = Path(workdir) / f"trial-{record['number']}.onnx"
            attrs = record["user_attrs"]
            try:
                download_artifact(
                    artifact_store=artifact_store, file_path=str(path),
                    artifact_id=attrs[ARTIFACT_ID],
                )  # fmt: skip
            except ArtifactNotFound:
                raise ModelMissing(missing_model(name, record["number"], attrs[ARTIFACT_ID],
                                                 artifact_store)) from None  # fmt: skip
            deployed = Deployment.of_record(target, attrs)  # its runtime, batch and method
            batch, method = deployed.batch_size, deployed.method
            # Alone on a shared GPU, and on the TensorRT engine the trial built (its cache's).
            with (
                measurement_lock(target),
                engine_folder(path, batch, deployed.target, method, cache) as engines,
            ):
                run_once, env = ort_run_timer(
                    path, deployed.target, data.x_test, batch, method=method,
                    optimization=deployed.optimization, cache_dir=engines,
                )  # fmt: skip
                samples, stop = sample_until_decided(
                    run_once, batch, kept, min_runs=_MIN_RUNS, rel_ci=_REL_CI,
                    max_seconds=max_seconds,
                )  # fmt: skip
            results[record["number"]] = {
                **_record(samples, batch, kept),
                "stop": stop,
                "first_p50_ms": attrs["latency_p50_ms"],
                "first_p99_ms": attrs["latency_p99_ms"],
                "first_runs": (attrs.get("latency") or {}).get("runs"),
                "source": "onnxruntime",
                "provider": env["provider"],
                "env": env,
            }
    study.set_user_attr(REMEASURED_ATTR, {str(k): v for k, v in results.items()})
    return results


def _record(samples: list[float], batch_size: int, budgets: Sequence[Budget]) -> dict:
    """Statistics, quantile intervals and decisions of one model's runs, JSON-able."""
    stats = latency_stats(samples, batch_size)
    return {
        **asdict(stats),
        "converged": stats.ci_rel <= _REL_CI,
        "intervals": {
            m.name: quantile_interval(samples, m.quantile).as_dict()
            for m in REGISTRY.values()
            if m.quantile is not None and m.per == "batch"
        },
        "decisions": [d.as_dict() for d in decide_all(samples, batch_size, budgets)],
    }
