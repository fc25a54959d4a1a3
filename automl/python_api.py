"""The Python way in: :func:`optimize` runs a study in this process, :func:`load` reopens one.

Both go through the functions that ``automl study start`` and the REST API call: the study is
created by :func:`automl.service.create.create_study`, its trials run in
:func:`automl.fleet.study_loop.run_study_loop`, and the front is re-measured at the end by
:func:`automl.fleet.remeasure.remeasure_front`. So a study started here can be resumed,
inspected or served by the CLI and the API, and the other way round.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automl.errors import SpecError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from optuna.storages import BaseStorage
    from torch import nn

    from automl.progress import BarKind
    from automl.search.objectives import Constraint, Objective
    from automl.search.spec import StudySpec
    from automl.settings import Settings
    from automl.study_result import StudyResult

logger = logging.getLogger("automl")
# Reasons a run ends after which the study is complete enough to re-measure its front.
_FINISHED = ("done", "timeout", "stopped", "max-trials", "converged")
_BUDGET_ONLY = {"name", "n_trials", "timeout_s"}


def optimize(
    spec: StudySpec | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    search_space: str | os.PathLike[str] | None = None,
    dataset: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    target: str | None = None,
    objectives: Sequence[str | Mapping[str, Any] | Objective] | None = None,
    constraints: Sequence[str | Constraint] | None = None,
    n_trials: int | None = None,
    timeout_s: float | None = None,
    sampler: str | None = None,
    seed: int | None = None,
    name: str | None = None,
    storage: str | None = None,
    artifacts_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    remeasure: bool = True,
    retry_failed: bool = False,
    mlflow_uri: str | None = None,
    model: nn.Module | Mapping[str, Any] | str | os.PathLike[str] | None = None,
    standardize: str | None = None,
    verbose: bool = False,
) -> StudyResult:
    """Create (or resume) a study and run its trials here until it is done.

    The spec comes from ``spec`` (a YAML or JSON path, the name of a shipped spec such as
    ``digits``, a dict or a :class:`~automl.search.spec.StudySpec`), and each keyword argument
    that is not None overrides its field. Without ``spec``, the keywords alone make the spec,
    with :class:`~automl.search.spec.StudySpec`'s defaults for the rest; ``name`` alone (with a
    new ``n_trials`` or ``timeout_s`` at most) resumes that study with its stored spec.

    A study of the same name and spec is resumed: ``n_trials`` counts its COMPLETE trials in
    all, not those of this call. Ctrl-C stops after the running trial and returns (``ended``
    is ``interrupted``); a second Ctrl-C aborts the trial and raises ``KeyboardInterrupt``.

    Args:
        spec: The study spec, or None.
        search_space: A search space name (``digits-mlp``) or YAML path.
        dataset: ``digits``, an ``.npz`` path, ``package.module:function``, or a dict of
            arrays with the ``.npz`` keys (``x_train``, ``y_train``, ``x_test``, ``y_test``,
            optionally ``x_val``, ``y_val``, ``class_names``, and ``vocab_size`` for token
            ids). Arrays are saved once, by content, under ``<artifacts_dir>/datasets/``, and
            the study reads that file; messages and views call them ``dataset``.
        target: Where latency is measured, e.g. ``cpu``; it must be on this machine.
        objectives: Metrics such as ``"accuracy"``, or dicts with ``metric``, ``direction``
            and ``scale``.
        constraints: Budgets such as ``"latency_p99_ms <= 2"``; ``[]`` for none.
        n_trials: COMPLETE trials to reach.
        timeout_s: Seconds, counted from the study's first trial.
        sampler: ``default``, ``tpe``, ``nsga2``, ``random`` or ``gp``.
        seed: Seed of the data splits, training and sampler.
        name: The study's name; defaults to ``<search_space>-<target>``, with the dataset's
            file stem before the target where it is not ``digits``, and for a trained model
            its module and function (or ONNX file) in place of the space.
        storage: SQLAlchemy URL; defaults to the ``AUTOML_STORAGE`` setting
            (``sqlite:///studies/automl.db``).
        artifacts_dir: Where models go; defaults to ``AUTOML_ARTIFACTS_DIR``, else the folder
            ``artifacts`` beside a SQLite storage's file (``studies/artifacts``).
        progress: Show a progress bar (rich in a terminal, tqdm in a notebook), or one line
            per finished trial on stderr where there is neither.
        remeasure: Measure the front's latency again once the study is done, to decide
            latency budgets on more runs (see :func:`automl.fleet.remeasure.remeasure_front`).
        retry_failed: Let a study that ended on too many failed trials run again.
        mlflow_uri: Log each trial as an MLflow run there (the ``mlflow`` extra); defaults to
            the ``AUTOML_MLFLOW_URI`` setting, off when unset.
        model: A trained model to optimize against its measured baseline: an ``nn.Module``
            whose class builds it with no arguments (its weights are saved under
            ``<artifacts_dir>/models/``), or a dict with ``factory``
            (``package.module:function``) and ``weights`` (a ``torch.save``'d state dict).
            The space then defaults to ``trained-model``, the objectives to accuracy drop and
            speedup, and the constraint to ``accuracy_drop <= 0.01``. A dict may also give
            ``output_layer`` (found when left out), ``output`` (the logits' key or index, for
            a model that returns a ``ModelOutput``, a dict or a tuple) and
            ``expected_accuracy``. A path to an ``.onnx`` file optimizes that graph as it is
            (quantization method, batch, ONNX Runtime's graph optimisation; space
            ``onnx-model``), never pruned or fine-tuned.
        standardize: How float inputs are standardised: ``auto`` (per feature for (N, F),
            per channel for (N, C, ...), from the train split), ``scalar``, ``per_feature``,
            ``per_channel`` or ``none``; a trained model's default is ``none``.
        verbose: Keep Optuna's own INFO lines, which repeat each trial's params.

    Returns:
        The study, its front, and its exports.

    Raises:
        SpecError: The spec, search space or dataset is invalid, a study of that name
            exists with another spec, or the artifacts folder cannot be written. Nothing has
            run.
        TargetUnavailable: The target is not on this machine.
        StorageUnavailable: The storage cannot be reached.
    """
    from automl.fleet.preflight import prepare_studies
    from automl.progress import choose_bar
    from automl.service import studies
    from automl.storage.artifacts import require_writable
    from automl.storage.factory import open_artifact_store, open_storage
    from automl.study_result import StudyResult

    settings = _settings(storage, artifacts_dir, mlflow_uri)
    # Trials write their models there (and a module's weights go there first).
    require_writable(settings.artifacts_dir, "artifacts_dir= (or AUTOML_ARTIFACTS_DIR)")
    store = open_storage(settings.storage, settings)
    overrides = {
        "search_space": _text(search_space), "dataset": _dataset(dataset, settings),
        "dataset_name": "dataset" if isinstance(dataset, Mapping) else None,
        "target": target, "objectives": _listed(objectives),
        "constraints": _listed(constraints), "n_trials": n_trials, "timeout_s": timeout_s,
        "sampler": sampler, "seed": seed, "name": name, "model": _model(model, settings),
        "standardize": standardize,
    }  # fmt: skip
    study_spec = _study_spec(spec, _given(overrides), store)
    bar = choose_bar(progress)
    with _optuna_logs_quiet(not verbose):  # the bar tells the story
        prepare_studies(
            [study_spec], store, forgive_failures=retry_failed, tracking_uri=settings.mlflow_uri
        )
        ended = _run(study_spec.name, store, settings, bar)
    artifact_store = open_artifact_store(settings)
    if ended in _FINISHED and remeasure:
        from automl.fleet.remeasure import remeasure_front

        remeasure_front(study_spec.name, store, artifact_store, settings=settings)
    _say_how_it_ended(study_spec.name, ended)
    study, stored = studies.load(study_spec.name, store)
    return StudyResult(study, stored, store, artifact_store, ended)


def load(
    name: str, storage: str | None = None, *, artifacts_dir: str | os.PathLike[str] | None = None
) -> StudyResult:
    """Reopen a study that :func:`optimize`, the CLI or the REST API created.

    Args:
        name: The study's name.
        storage: SQLAlchemy URL; defaults to the ``AUTOML_STORAGE`` setting.
        artifacts_dir: Where its models are; defaults as :func:`optimize`'s does.

    Returns:
        The study, its front, and its exports (``ended`` is None).

    Raises:
        StudyNotFound: No study of that name.
        StorageUnavailable: The storage cannot be reached, or a SQLite file does not exist.
    """
    from automl.service.studies import load as load_study
    from automl.storage.factory import open_artifact_store, open_storage
    from automl.study_result import StudyResult

    settings = _settings(storage, artifacts_dir)
    store = open_storage(settings.storage, settings, create=False)
    study, spec = load_study(name, store)
    return StudyResult(study, spec, store, open_artifact_store(settings, create=False))


def _settings(
    storage: str | None,
    artifacts_dir: str | os.PathLike[str] | None,
    mlflow_uri: str | None = None,
) -> Settings:
    from automl.settings import get_settings

    folder = Path(artifacts_dir) if artifacts_dir is not None else None
    settings = get_settings().for_command(storage, folder)
    if mlflow_uri is None:
        return settings
    return settings.model_copy(update={"mlflow_uri": mlflow_uri})


def _study_spec(
    spec: Mapping[str, Any] | str | os.PathLike[str] | StudySpec | None,
    given: dict[str, Any],
    storage: BaseStorage,
) -> StudySpec:
    """The spec from ``spec`` and the keywords that were given (see :func:`optimize`); a
    name left out is made of its inputs (see :func:`automl.service.create.named_for_inputs`)."""
    from automl.search.spec import StudySpec, load_spec, parse_spec
    from automl.service.create import named_for_inputs
    from automl.service.studies import StudyNotFound
    from automl.service.studies import load as load_study

    if spec is None and "name" in given and set(given) <= _BUDGET_ONLY:
        try:
            stored = load_study(given["name"], storage)[1]
        except StudyNotFound:
            pass
        else:
            return parse_spec({**stored.model_dump(mode="json"), **given})
    if spec is None:
        return named_for_inputs(parse_spec(given))
    if isinstance(spec, StudySpec):  # a derived name follows the fields it derives from
        values = spec.model_dump(mode="json", exclude_unset=True)
        return named_for_inputs(parse_spec({**values, **given}))
    if isinstance(spec, Mapping):
        return named_for_inputs(parse_spec({**spec, **given}))
    return named_for_inputs(load_spec(os.fspath(spec), **given))


def _given(overrides: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in overrides.items() if value is not None}


def _text(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _listed(values: Sequence | str | None) -> list | None:
    if values is None:
        return None
    return [values] if isinstance(values, str) else list(values)


def _model(
    model: nn.Module | Mapping[str, Any] | str | os.PathLike[str] | None, settings: Settings
) -> dict | None:
    if isinstance(model, str | os.PathLike):
        if not os.fspath(model).lower().endswith(".onnx"):
            raise SpecError(
                f"model {os.fspath(model)!r} is no .onnx file: pass an nn.Module, a path to an "
                ".onnx graph, or {'factory': 'package.module:function', 'weights': path}"
            )
        return {"weights": os.fspath(model)}
    if model is None or isinstance(model, Mapping):
        paths = {k: os.fspath(v) for k, v in (model or {}).items() if isinstance(v, os.PathLike)}
        return None if model is None else {**model, **paths}
    from torch import nn

    from automl.inputs.trained_model import save_module

    if isinstance(model, nn.Module):
        return save_module(model, settings.artifacts_dir / "models")
    raise SpecError(f"model must be an nn.Module or a dict, not {type(model).__name__}")


def _dataset(
    dataset: str | os.PathLike[str] | Mapping[str, Any] | None, settings: Settings
) -> str | None:
    if dataset is None or isinstance(dataset, str | os.PathLike):
        return _text(dataset)
    if isinstance(dataset, Mapping):
        return str(save_arrays(dataset, settings.artifacts_dir / "datasets"))
    raise SpecError(
        f"dataset must be a name, a path or a dict of arrays, not {type(dataset).__name__}"
    )


def save_arrays(arrays: Mapping[str, Any], folder: Path) -> Path:
    """Save a dataset's arrays as ``<folder>/<content hash>.npz``, once per content.

    The same arrays always give the same absolute path, so that a study on them resumes.

    Args:
        arrays: The ``.npz`` keys (see :func:`automl.inputs.data.load_dataset`) and their arrays.
        folder: Where the file goes; created if missing.

    Returns:
        The file's absolute path.

    Raises:
        SpecError: An array holds Python objects, which an ``.npz`` cannot be read back with.
    """
    import hashlib

    import numpy as np

    values = {key: np.asarray(value) for key, value in arrays.items()}  # scalars stay 0-d
    digest = hashlib.sha256()
    for key in sorted(values):
        value = values[key]
        if value.dtype.hasobject:
            raise SpecError(
                f"dataset array {key!r} holds Python objects; pass numbers (class_names as strings)"
            )
        digest.update(f"{key}:{value.dtype.str}:{value.shape};".encode())
        digest.update(value.tobytes())
    folder = folder.expanduser().resolve()
    path = folder / f"{digest.hexdigest()[:20]}.npz"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
    try:
        with os.fdopen(handle, "wb") as f:
            np.savez(f, **values)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _run(name: str, storage: BaseStorage, settings: Settings, bar_kind: BarKind) -> str:
    """Run study ``name``'s trials here with a progress bar; returns why the loop ended."""
    from automl.fleet.study_loop import GracefulStop, run_study_loop
    from automl.progress import open_bar
    from automl.service.studies import load as load_study
    from automl.storage.factory import open_artifact_store

    study, spec = load_study(name, storage)
    bar = open_bar(bar_kind, name, spec.n_trials, _status(study, spec.objectives)[0])
    # Signal handlers can only be installed from the main thread; elsewhere Ctrl-C aborts.
    stop = GracefulStop() if threading.current_thread() is threading.main_thread() else None
    try:
        if stop is not None:
            stop.install()
        result = run_study_loop(
            name, storage, artifact_store=open_artifact_store(settings), settings=settings,
            stop=stop, on_trial_end=lambda _: bar.update(*_status(study, spec.objectives)),
        )  # fmt: skip
        bar.update(*_status(study, spec.objectives))
    finally:
        if stop is not None:
            stop.uninstall()
        bar.close()
    return "interrupted" if stop is not None and stop.interrupted else result.reason


@contextlib.contextmanager
def _optuna_logs_quiet(quiet: bool) -> Iterator[None]:
    """Optuna logs warnings only while the block runs, when ``quiet``."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    if quiet:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _status(study: Any, objectives: Sequence[Objective]) -> tuple[int, str]:
    """COMPLETE trials, and the bar's status: failures and the front's best accuracy, the front
    as ``automl study pareto`` shows it (Optuna's, less its ties within noise)."""
    from automl.service.read import shown_front
    from automl.service.studies import state_counts

    counts, _ = state_counts(study._storage, study._study_id)
    text = f"failed {counts['FAIL']}"
    if counts["COMPLETE"]:
        shown = shown_front(optunas := study.best_trials, objectives)
        front = [t for t in optunas if t.number in shown]
        best = max((t.user_attrs.get("accuracy", 0.0) for t in front), default=None)
        text += f"  front {len(front)}" + (f"  best acc {best:.3f}" if best is not None else "")
    return counts["COMPLETE"], text


def _say_how_it_ended(name: str, ended: str) -> None:
    if ended in ("interrupted", "signal"):
        logger.warning(
            "study %s stopped after its running trial; automl.optimize(name=%r) resumes it",
            name, name,
        )  # fmt: skip
    elif ended == "too-many-failures":
        logger.warning(
            "study %s ended on too many failed trials; their fail_reason user attrs say why "
            "(`automl study show %s`); once fixed, automl.optimize(name=%r, retry_failed=True) "
            "resumes it",
            name, name, name,
        )  # fmt: skip
