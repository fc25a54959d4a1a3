"""Creating a study: every check of its spec first, then the study with its first trials.

A refused spec leaves nothing behind: :func:`check_study` creates nothing, and a caller with
several specs checks them all before :func:`create_checked` creates any.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

from automl.errors import SpecError
from automl.inputs.data import BUILTIN_DATASETS, check_source_form, load_dataset
from automl.records import BASELINE, CONVERGED_ATTR, REFUSED_ATTR, SPEC_ATTR, STOP_ATTR
from automl.search.baseline import baseline_params
from automl.search.compat import check_compatible, check_target
from automl.search.space import load_space, with_scenario
from automl.search.spec import StudySpec, parse_spec
from automl.service.fingerprints import DATA_ATTR, check_fingerprint
from automl.targets import load_target

if TYPE_CHECKING:
    from collections.abc import Mapping

    from optuna.storages import BaseStorage

    from automl.search.space import SearchSpace


# The suffixes of the files a default study name is made of: spaces, datasets, ONNX models.
_INPUT_SUFFIXES = (".yaml", ".yml", ".npz", ".onnx")


@dataclass(frozen=True)
class CheckedSpec:
    """A spec that every check of :func:`check_study` passed, with what its study needs."""

    spec: StudySpec  # with its space's serving scenario
    target: str
    firsts: tuple[dict | None, dict]  # the baseline's params, the capacity-first settings
    fingerprint: str | None


def check_study(
    spec: StudySpec, storage: BaseStorage, *, check_data: bool = True, resume: bool = True
) -> CheckedSpec:
    """Refuse what :func:`create_study` refuses (its arguments and errors), and create nothing.

    A caller with several specs (``--target cpu,a100``) checks them all before it creates
    any study, so that one refused spec leaves no study behind.
    """
    target = load_target(spec.target)
    space = load_space(spec.search_space)
    spec = with_scenario(spec, space)
    stored = _stored_spec(storage, spec.name)  # first: a taken name loads no data
    if stored is not None and not resume:
        raise optuna.exceptions.DuplicatedStudyError(f"study {spec.name!r} exists")
    _require_same_spec(stored, spec)
    check_target(space, target)
    baseline = _baseline_params(spec, space)
    serving_max = spec.serving is not None and spec.serving.rate_rps == "max"
    first = space.capacity_first() if serving_max else {}
    check_source_form(spec.dataset)
    fingerprint = None
    if check_data or _readable_here(spec.dataset):
        data = load_dataset(**spec.data_args)
        check_compatible(space, data, target)  # family vs data, methods vs target
        fingerprint = data.fingerprint
    if stored is not None:
        _check_resume(storage, stored, spec, fingerprint)
    return CheckedSpec(spec, target.name, (baseline, first), fingerprint)


def check_name(spec: StudySpec, storage: BaseStorage) -> None:
    """Refuse a spec whose name a stored study of another spec has, in a moment: no data,
    model or heavy library is loaded for it (:func:`check_study` checks it so too).

    Raises:
        SpecError: The study exists with another spec; the message names the fields that
            differ and says to choose another name.
    """
    stored = _stored_spec(storage, spec.name)
    _require_same_spec(stored, with_scenario(spec, load_space(spec.search_space)))


def named_for_inputs(spec: StudySpec) -> StudySpec:
    """``spec`` under a default name that tells its inputs apart, where no name was given.

    The name is ``<what>-<data>-<target>``. ``what`` is the trained model, by its module and
    function (``pkg.mymodel:build`` as ``mymodel.build``) or its ONNX file's stem, else the
    search space (a file by its stem); ``data`` is the dataset's file stem (``pkg.data:load``
    as ``data.load``), left out for the built-in ``digits``. A second dataset on one space,
    or a second model whose function is also ``build``, so gets a study of its own.
    """
    if "name" in spec.model_fields_set:
        return spec
    model = spec.model
    if model is None:
        parts = [_stem(spec.search_space)]
    else:
        parts = [_reference(model.factory) if model.factory else _stem(model.weights)]
    if spec.dataset not in BUILTIN_DATASETS:
        parts.append(_reference(spec.dataset) if ":" in spec.dataset else _stem(spec.dataset))
    what = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts)).strip("_.-") or "study"
    return spec.model_copy(update={"name": f"{what[:90]}-{spec.target}"})


def _stem(path: str) -> str:
    """The stem of a space, data or ONNX file (``data/my-data.npz``: ``my-data``); a shipped
    space's name as it is."""
    file = Path(path)
    return file.stem if file.suffix.lower() in _INPUT_SUFFIXES else file.name


def _reference(plugin: str) -> str:
    """``package.module:function`` as ``module.function``."""
    module, _, function = plugin.partition(":")
    return f"{module.rpartition('.')[2]}.{function}"


def create_study(
    spec: StudySpec,
    storage: BaseStorage,
    *,
    check_data: bool = True,
    resume: bool = True,
    attrs: Mapping[str, object] | None = None,
) -> optuna.Study:
    """Create the study for ``spec``, or resume the existing one with the same spec.

    Validates the search space against the target, and loads and checks the dataset (with
    ``check_data`` off, only where it is on this host: it may exist on the workers' only), so
    that nothing runs on bad input. The data's fingerprint is stored with the study, and a
    resume on other data is refused. Two processes that create one study at once both get it.

    Args:
        spec: The spec.
        storage: Where studies live.
        check_data: Load the dataset here.
        resume: Resume a study of that name; otherwise its existence is an error.
        attrs: More user attrs of a new study, written before its spec, which marks it ready
            for workers (e.g. the data root of a REST submission).

    Raises:
        SpecError: The space or target is invalid, the space's families cannot take the data
            (see :func:`automl.search.compat.check_compatible`), or a study of that name has
            another spec.
        DataError: The dataset is missing, malformed, or not the data the study began with.
        optuna.exceptions.DuplicatedStudyError: The study exists and ``resume`` is off.
    """
    checked = check_study(spec, storage, check_data=check_data, resume=resume)
    return create_checked(checked, storage, resume=resume, attrs=attrs)


def create_checked(
    checked: CheckedSpec,
    storage: BaseStorage,
    *,
    resume: bool = True,
    attrs: Mapping[str, object] | None = None,
) -> optuna.Study:
    """Create (or resume) the study of a spec that :func:`check_study` passed; the arguments
    are :func:`create_study`'s."""
    spec = checked.spec
    if _stored_spec(storage, spec.name) is None:
        try:
            return _new_study(
                spec, storage, checked.target, checked.fingerprint, checked.firsts, attrs or {}
            )
        except optuna.exceptions.DuplicatedStudyError:
            if not resume:
                raise
            stored = _await_spec(storage, spec.name)  # a concurrent start created it
            _check_resume(storage, stored, spec, checked.fingerprint)
    elif not resume:
        raise optuna.exceptions.DuplicatedStudyError(f"study {spec.name!r} exists")
    study = optuna.load_study(study_name=spec.name, storage=storage)
    study.set_user_attr(SPEC_ATTR, spec.model_dump(mode="json"))
    study.set_user_attr(STOP_ATTR, False)
    for ended in (REFUSED_ATTR, CONVERGED_ATTR):  # resumed: its input fixed, or its budget
        if study.user_attrs.get(ended):
            study.set_user_attr(ended, None)
    return study


def _require_same_spec(stored: StudySpec | None, spec: StudySpec) -> None:
    """Refuse ``spec`` where a study of its name is ``stored`` with another spec."""
    if stored is not None and stored.comparable() != spec.comparable():
        raise SpecError(_spec_mismatch(spec.name, stored, spec))


def _check_resume(
    storage: BaseStorage, stored: StudySpec, spec: StudySpec, fingerprint: str | None
) -> None:
    """Refuse to resume a stored study with another spec, old values or other data."""
    _require_same_spec(stored, spec)
    study = optuna.load_study(study_name=spec.name, storage=storage)
    _require_raw_values(study, spec)
    if fingerprint is not None:
        check_fingerprint(study, spec, fingerprint)


def _readable_here(source: str) -> bool:
    """Whether a dataset that may live on the workers only is on this host all the same."""
    return source in BUILTIN_DATASETS or (source.endswith(".npz") and Path(source).is_file())


def _baseline_params(spec: StudySpec, space: SearchSpace) -> dict | None:
    """The params of a trained model's baseline trial; None for a study that trains models.

    Raises:
        SpecError: The space does not fit the study's kind, or cannot express the baseline.
    """
    space.check_model(spec.model is not None, spec.model is not None and spec.model.is_onnx)
    return baseline_params(spec, space) if spec.model is not None else None


def _new_study(
    spec: StudySpec,
    storage: BaseStorage,
    target: str,
    fingerprint: str | None,
    firsts: tuple[dict | None, dict],
    attrs: Mapping[str, object],
) -> optuna.Study:
    """A new study with its first trials queued: the baseline of a trained model, where there
    is one, then the capacity-first serving settings of a max-rate study, where there are."""
    study = optuna.create_study(study_name=spec.name, storage=storage, directions=spec.directions)
    baseline, capacity_first = firsts
    if baseline is not None:  # the first trial: the unmodified model, measured
        study.enqueue_trial(baseline, user_attrs={BASELINE: True})
    if capacity_first:  # the sampler draws its other knobs
        study.enqueue_trial(capacity_first)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(spec.metric_names)
    if fingerprint is not None:
        study.set_user_attr(DATA_ATTR, fingerprint)
    study.set_user_attr("target", target)
    study.set_user_attr("search_space", spec.search_space)
    study.set_user_attr("dataset", spec.dataset_shown)
    study.set_user_attr("constraints", [str(c) for c in spec.constraints])
    study.set_user_attr("created_at", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    study.set_user_attr(STOP_ATTR, False)
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.set_user_attr(SPEC_ATTR, spec.model_dump(mode="json"))  # last: it marks it complete
    return study


def _await_spec(storage: BaseStorage, name: str, timeout_s: float = 5.0) -> StudySpec:
    """The spec of a study another process has just created, once it has written it."""
    deadline = time.monotonic() + timeout_s
    while True:
        attrs = storage.get_study_user_attrs(storage.get_study_id_from_name(name))
        if SPEC_ATTR in attrs:
            return parse_spec(attrs[SPEC_ATTR])
        if time.monotonic() > deadline:
            raise SpecError(f"study {name!r} exists but was not created by automl")
        time.sleep(0.05)


def _require_raw_values(study: optuna.Study, spec: StudySpec) -> None:
    """Refuse to resume a study whose objective values were stored as ``log10(...)``."""
    if study.metric_names not in (None, spec.metric_names):
        raise SpecError(
            f"study {spec.name!r} stores objectives {study.metric_names}, from an automl that "
            f"stored log10 values; its new trials would not compare. Start it under another "
            "--name."
        )


def _spec_mismatch(name: str, stored: StudySpec, new: StudySpec) -> str:
    old, now = stored.comparable(), new.comparable()
    fields = sorted(k for k in old if old[k] != now.get(k))
    return (
        f"study {name!r} already exists with a different spec (fields {fields} differ). "
        "Resume it with the same spec, or choose another name (--name, or name= in Python)."
    )


def _stored_spec(storage: BaseStorage, name: str) -> StudySpec | None:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return None
    return _await_spec(storage, name)
