"""What the network side may ask for: registered names only, data under the data root, caps."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from api.errors import ApiError
from automl.inputs.data import BUILTIN_DATASETS
from automl.search.space import list_spaces
from automl.search.spec import parse_spec
from automl.targets import list_targets

if TYPE_CHECKING:
    from automl.search.spec import StudySpec
    from automl.settings import Settings

_DATA_ROOT_SETTING = "the folder its operator set with AUTOML_DATA_ROOT"
_UPLOAD_HINT = "upload the file with PUT /v1/files/{name}"


def _reject(field: str, message: str) -> ApiError:
    return ApiError(422, "invalid_spec", message, field=field)


def check_spec(spec: StudySpec, settings: Settings) -> StudySpec:
    """Apply the server's policy to a submitted spec.

    The dataset is a built-in name or an ``.npz`` path relative to ``settings.data_root``;
    the returned spec names it by its path under the data root, as workers resolve it (and
    :func:`public_spec` shows it as it was given). A spec without ``n_trials`` gets the cap,
    so that no study runs unbounded.

    Raises:
        ApiError: 422 naming the field that breaks the policy.
    """
    targets = sorted(t.name for t in list_targets())
    if spec.target not in targets:
        raise _reject("target", f"unknown target {spec.target!r}; known targets: {targets}")
    spaces = list_spaces()
    if spec.search_space not in spaces:
        raise _reject("search_space", f"unknown search space {spec.search_space!r}; {spaces}")
    if spec.n_trials is not None and spec.n_trials > settings.max_n_trials:
        raise _reject("n_trials", f"n_trials may be at most {settings.max_n_trials}")
    if spec.timeout_s is not None and spec.timeout_s > settings.max_timeout_s:
        raise _reject("timeout_s", f"timeout_s may be at most {settings.max_timeout_s:g}")
    values = spec.model_dump(mode="json")
    if spec.n_trials is None:
        values["n_trials"] = settings.max_n_trials
    if spec.dataset not in BUILTIN_DATASETS:
        values["dataset"] = str(_data_file(spec.dataset, settings))
        values["dataset_name"] = spec.dataset_name or spec.dataset  # as given, never the root
    if spec.model is not None:
        values["model"] = _trained_model(spec.model.model_dump(), settings)
    return parse_spec(values)


def _trained_model(model: dict, settings: Settings) -> dict:
    """A trained model a client may name: an allowed factory (an ONNX graph needs none: it runs
    no Python), weights under the data root."""
    if model["factory"] is not None and model["factory"] not in settings.model_factories:
        raise _reject(
            "model.factory",
            f"model factory {model['factory']!r} is not allowed on this server; an operator "
            "allows factories with AUTOML_MODEL_FACTORIES",
        )
    weights = _under_data_root(model["weights"], settings, "model.weights", "weights")
    return {**model, "weights": str(weights)}


def public_spec(spec: dict, settings: Settings) -> dict:
    """A stored spec as a client sees it: paths relative to the data root; a path outside it
    (a study the CLI created on the same storage) by its file name, never the server's path."""
    root = settings.data_root.resolve()

    def relative(path: str) -> str:
        given = Path(path)
        if not given.is_absolute():
            return path
        return given.relative_to(root).as_posix() if given.is_relative_to(root) else given.name

    shown = {**spec, "dataset": relative(spec["dataset"])}
    if "search_space" in spec:  # a space file the CLI was given
        shown["search_space"] = relative(spec["search_space"])
    if spec.get("model"):
        shown["model"] = {**spec["model"], "weights": relative(spec["model"]["weights"])}
    return shown


def _data_file(name: str, settings: Settings) -> Path:
    if PurePosixPath(name).suffix != ".npz":
        raise _reject(
            "dataset",
            f"dataset must be one of {list(BUILTIN_DATASETS)} or an .npz file by its path "
            f"under the server's data root ({_DATA_ROOT_SETTING}); {_UPLOAD_HINT}",
        )
    return _under_data_root(name, settings, "dataset", "dataset")


def _under_data_root(name: str, settings: Settings, field: str, what: str) -> Path:
    """The file ``name``, relative to the data root, that must lie inside it and exist."""
    relative = PurePosixPath(name)
    unsafe = (
        "\x00" in name or name.startswith("~") or relative.is_absolute() or ".." in relative.parts
    )
    if unsafe:
        raise _reject(
            field,
            f"{field} must be a relative path under the server's data root "
            f"({_DATA_ROOT_SETTING}), such as {PurePosixPath(name).name!r}; {_UPLOAD_HINT}",
        )
    root = settings.data_root.resolve()
    path = root / relative  # absolute: a worker in another folder finds the same file
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop; RuntimeError before Python 3.13
        raise _reject(field, f"{field} {name!r} is a symlink loop: name the file itself") from None
    if not resolved.is_relative_to(root) or not path.is_file():
        raise _reject(
            field,
            f"no {what} file {name!r} under the server's data root ({_DATA_ROOT_SETTING}): "
            f"{_UPLOAD_HINT}, or copy the file there, and name it by its path in it",
        )
    return path
