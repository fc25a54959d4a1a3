"""Exporting a trial's model: the ONNX file plus a ``model.json`` sidecar to deploy it."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from automl.inputs.data import DESCRIPTION_ATTR, cached_dataset, describe_dataset
from automl.records import ARTIFACT_ID, RECORDED_METRICS, TrialRecord, built_of
from automl.service.read import model_trial
from automl.service.studies import TrialNotFound

if TYPE_CHECKING:
    from collections.abc import Mapping

    from onnx import GraphProto, ModelProto
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage
    from optuna.trial import FrozenTrial

    from automl.search.spec import StudySpec

# The sidecar fields also written into the ONNX file's metadata_props, as JSON under
# "automl.<field>". The file's sha256 cannot be among them: writing it would change the file.
METADATA_FIELDS = (
    "study",
    "trial",
    "target",
    "dataset",
    "params",
    "candidate",
    "deployed",
    "metrics",
    "env",
    "class_names",
    "raw_input",
    "preprocessing",
    "input",
    "output",
    "measured_with",
    "runtime",
)
METADATA_PREFIX = "automl."


class ModelMissing(TrialNotFound):
    """A trial's model file is not in the artifact store (another folder, or removed), or
    something other than a file has its name there."""


def missing_model(
    name: str, number: int, artifact_id: str, artifact_store: FileSystemArtifactStore
) -> str:
    """What to say of a trial's model that is not in ``artifact_store``, and the fix."""
    folder = getattr(artifact_store, "_base_path", "the artifact store")
    return (
        f"the model of trial {number} of study {name!r} (artifact {artifact_id}) is not in "
        f"{str(folder)!r}: the study wrote it to another folder, or it was removed. Give "
        "--artifacts-dir (or set AUTOML_ARTIFACTS_DIR) to the folder the study ran with"
    )


def _not_a_file(
    name: str, number: int, artifact_id: str, artifact_store: FileSystemArtifactStore
) -> ModelMissing:
    folder = getattr(artifact_store, "_base_path", "the artifact store")
    return ModelMissing(
        f"the model of trial {number} of study {name!r} (artifact {artifact_id}) in "
        f"{str(folder)!r} is a folder, not a file: something replaced the model file; put the "
        "file back, or export another trial"
    )


def export_model(
    name: str,
    storage: BaseStorage,
    artifact_store: FileSystemArtifactStore,
    number: int,
    out: Path | str,
) -> dict:
    """Write trial ``number``'s ONNX model to ``out`` and its sidecar beside it.

    The sidecar (``model.json`` for ``model.onnx``) holds params, metrics, target, the
    environment fingerprint, and what a deployment needs: ``class_names`` (one per logit),
    ``raw_input`` (dtype and train range of the raw inputs), ``preprocessing`` (its formula,
    mean and std), ``input``, ``output`` (raw logits, no softmax), ``measured_with`` (provider,
    latency backend and its timing, threads and batch size of the recorded accuracies and
    latency), ``runtime`` (the runtime the trial was measured on, its version and settings: see
    :func:`measured_runtime`) and the ``sha256`` of the written model file. The fields in
    :data:`METADATA_FIELDS` are also the model's ``metadata_props``, JSON-encoded under
    ``automl.<field>``; the file's own hash cannot be among them, so it is in the sidecar only.
    ``deployed`` says what the file is, where the ``candidate`` says what was asked: its label,
    the method of its graph (``fp32`` where a per-layer method kept every layer) and the widths
    that pruning kept.

    Args:
        name: The study.
        storage: Its storage.
        artifact_store: Where the trial's model was uploaded.
        number: The trial.
        out: Path of the ``.onnx`` file to write.

    Returns:
        The sidecar's content.

    Raises:
        TrialNotFound: No such trial, or it has no model (it did not complete).
        ModelMissing: The trial's model file is not in the artifact store, or is a folder.
        DataError: The trial predates recorded data descriptions, and its dataset can no
            longer be loaded to describe it.
    """
    import onnx
    from optuna.artifacts import download_artifact
    from optuna.artifacts.exceptions import ArtifactNotFound

    trial, spec = model_trial(name, storage, number)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    artifact_id = trial.user_attrs[ARTIFACT_ID]
    try:
        download_artifact(
            artifact_store=artifact_store, file_path=str(out), artifact_id=artifact_id
        )
    except ArtifactNotFound:
        raise ModelMissing(missing_model(name, number, artifact_id, artifact_store)) from None
    except IsADirectoryError:
        raise _not_a_file(name, number, artifact_id, artifact_store) from None
    model = onnx.load(str(out))
    sidecar = {
        "study": name,
        "trial": number,
        "file": out.name,
        "target": spec.target,
        "dataset": spec.dataset_shown,
        "params": trial.params,
        "candidate": trial.user_attrs.get("candidate"),
        "deployed": _deployed(trial),
        "metrics": {k: trial.user_attrs[k] for k in RECORDED_METRICS if k in trial.user_attrs},
        "latency": trial.user_attrs.get("latency"),
        "env": trial.user_attrs.get("env"),
        **_serving(trial),
        "inputs": [_io(v) for v in model.graph.input],
        "outputs": [_io(v) for v in model.graph.output],
        **_deployment(trial, spec, model.graph),
        "runtime": measured_runtime(trial.user_attrs),
    }
    _set_metadata(model, {key: sidecar[key] for key in METADATA_FIELDS})
    onnx.save(model, str(out))
    sidecar["sha256"] = _sha256(out)
    out.with_suffix(".json").write_text(json.dumps(sidecar, indent=2))
    return sidecar


def open_export(
    name: str, storage: BaseStorage, artifact_store: FileSystemArtifactStore, number: int
) -> BinaryIO:
    """Trial ``number``'s model as :func:`export_model` writes it, open for reading; the caller
    closes it. A trial recorded before data descriptions were comes as stored: describing it
    would load its dataset here, on a host (the REST service's) that may not have it.

    Raises:
        TrialNotFound: No such trial, or it has no model (it did not complete).
        ModelMissing: The trial's model file is not in the artifact store, or is a folder.
        optuna.artifacts.exceptions.ArtifactNotFound: The same, for a trial that comes as stored.
    """
    trial, _ = model_trial(name, storage, number)
    if DESCRIPTION_ATTR not in trial.user_attrs:
        try:
            return artifact_store.open_reader(trial.user_attrs[ARTIFACT_ID])
        except IsADirectoryError:
            artifact_id = trial.user_attrs[ARTIFACT_ID]
            raise _not_a_file(name, number, artifact_id, artifact_store) from None
    with tempfile.TemporaryDirectory(prefix="automl-model-") as folder:
        path = Path(folder) / "model.onnx"
        export_model(name, storage, artifact_store, number, path)
        return path.open("rb")  # still readable once its folder is gone


def _deployed(trial: FrozenTrial) -> dict:
    """What the exported model is, as built (see :class:`automl.candidate.Built`)."""
    record = TrialRecord.of(trial, [], on_front=False)
    built = built_of(trial.user_attrs)
    widths = list(built.widths) if built else []
    return {"label": record.label, "method": record.method, "widths": widths}


def _serving(trial: FrozenTrial) -> dict:
    """A serving study's settings found and what they achieved, for the sidecar."""
    served = trial.user_attrs.get("serving")
    if not served:
        return {}
    loads = {
        k: trial.user_attrs[k] for k in ("max_rate_rps", "serving_p99_ms") if k in trial.user_attrs
    }
    return {"serving": {"settings": served["settings"], "scenario": served["scenario"], **loads}}


def _deployment(trial: FrozenTrial, spec: StudySpec, graph: GraphProto) -> dict:
    """The sidecar's deployment fields: labels, raw input, preprocessing, I/O, runtime."""
    description = trial.user_attrs.get(DESCRIPTION_ATTR)
    if description is None:  # a trial recorded before data descriptions were
        description = describe_dataset(cached_dataset(**spec.data_args))
        recorded = trial.user_attrs.get("preprocessing") or {}
        description["preprocessing"].update(recorded)  # what this model was trained on
    env = trial.user_attrs.get("env") or {}
    candidate = trial.user_attrs.get("candidate") or {}
    (model_input,) = (_io(v) for v in graph.input)
    logits = _io(graph.output[0])
    return {
        "class_names": description["class_names"],
        "raw_input": description["raw_input"],
        "preprocessing": description["preprocessing"],
        "input": model_input,
        "output": {
            **logits,
            "kind": "logits",
            "softmax_applied": False,
            "num_classes": len(description["class_names"]),
        },
        "measured_with": {
            "provider": env.get("provider"),
            "backend": env.get("backend"),
            "timing": env.get("timing"),
            "intra_op_threads": env.get("intra_op_threads"),
            "batch_size": candidate.get("batch_size"),
            "onnxruntime": env.get("onnxruntime"),
        },
    }


def measured_runtime(attrs: Mapping[str, Any]) -> dict:
    """The runtime a trial was measured on, from its user ``attrs``: ``name``, ``version`` and
    the ``settings`` it ran with.

    The name is the trial's recorded deployment's (``history.deployment``); a trial recorded
    before deployments were names it in ``env.backend``, and one older still ran on ``ort-cpu``.
    OpenVINO's settings are its compiled model's (``env.openvino_config``) and its version the
    release (the build is in ``env.openvino``); ONNX Runtime's are the intra-op threads and the
    graph optimisation level.
    """
    env = attrs.get("env") or {}
    deployment = (attrs.get("history") or {}).get("deployment") or {}
    name = deployment.get("runtime") or env.get("backend") or "ort-cpu"
    if name == "openvino":
        version, settings = env.get("openvino"), env.get("openvino_config")
    else:
        asked = (attrs.get("candidate") or {}).get("graph_optimization")
        optimization = env.get("graph_optimization") or deployment.get("optimization") or asked
        version = env.get("onnxruntime")
        settings = {
            "intra_op_threads": env.get("intra_op_threads", deployment.get("threads")),
            "graph_optimization": optimization or "all",
        }
    release = version.partition("-")[0] if isinstance(version, str) else version
    return {"name": name, "version": release, "settings": settings}


def _set_metadata(model: ModelProto, fields: dict) -> None:
    """Set ``automl.<field>`` metadata props to each field's JSON, keeping other props."""
    props = {p.key: p.value for p in model.metadata_props}
    props.update({METADATA_PREFIX + k: json.dumps(v, sort_keys=True) for k, v in fields.items()})
    del model.metadata_props[:]
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _io(value) -> dict:
    from onnx import helper

    tensor = value.type.tensor_type
    shape = [d.dim_param or d.dim_value for d in tensor.shape.dim]
    return {
        "name": value.name,
        "dtype": helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
        "shape": shape,
    }
