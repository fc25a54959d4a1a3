"""Re-measuring the latency of a study's Pareto trials, e.g. after a noisy run."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from automl.objective import ARTIFACT_ID, cached_dataset
from automl.studies import load, pareto_front
from automl.targets import load_target

if TYPE_CHECKING:
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

REMEASURED_ATTR = "remeasured_front"


def remeasure_front(
    name: str, storage: BaseStorage, artifact_store: FileSystemArtifactStore
) -> dict[int, dict]:
    """Measure every front trial's model again, one after the other on a quiet study.

    Finished trials cannot change, so the new figures go into the study user attr
    ``remeasured_front`` (trial number → latency record with the first measurement's p50).

    Returns:
        The new latency records by trial number.

    Raises:
        TargetUnavailable: This machine does not have the study's target.
    """
    from optuna.artifacts import download_artifact

    from automl.pipeline.latency import measure_latency

    study, spec = load(name, storage)
    target = load_target(spec.target)
    data = cached_dataset(spec.dataset, spec.seed)
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory(prefix="automl-remeasure-") as workdir:
        for record in pareto_front(name, storage):
            path = Path(workdir) / f"trial-{record['number']}.onnx"
            attrs = record["user_attrs"]
            download_artifact(
                artifact_store=artifact_store, file_path=str(path), artifact_id=attrs[ARTIFACT_ID]
            )
            batch = attrs["candidate"]["batch_size"]
            # Only the front is re-measured, so it can afford a stricter measurement.
            latency = measure_latency(
                path,
                target,
                data.x_test,
                batch,
                min_runs=200,
                rel_ci=0.01,
                max_seconds=5.0,
                min_seconds=5.0,
            ).as_dict()
            latency["first_p50_ms"] = attrs["latency_p50_ms"]
            results[record["number"]] = latency
    study.set_user_attr(REMEASURED_ATTR, {str(k): v for k, v in results.items()})
    return results
