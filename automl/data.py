"""Datasets: the built-in ``digits``, user ``.npz`` files and ``module:function`` plugins.

Every dataset is split deterministically by seed into train / val / test, plus a calibration
subset for static quantization that is drawn from train, never from test. Inputs are
standardised with the train split's scalar mean and std, which are recorded as preprocessing:
``x_model = (float32(x_raw) - mean) / std``, computed in float32, with ``mean`` and ``std``
float32 values, so that a deployment reproduces the model's inputs bit for bit.
"""

from __future__ import annotations

import hashlib
import importlib
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from sklearn.model_selection import train_test_split

from automl.errors import DataError

BUILTIN_DATASETS = ("digits",)
# The trial user attr holding :func:`describe_dataset` of the data the trial ran on.
DESCRIPTION_ATTR = "data_description"
_REQUIRED_KEYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class Dataset:
    """Float32 inputs of shape (N, *input_shape) and int64 labels, split and standardised."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    x_calib: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    preprocessing: dict = field(default_factory=dict)
    fingerprint: str = ""
    class_names: tuple[str, ...] = ()
    raw_input: dict = field(default_factory=dict)


def load_dataset(
    source: str,
    *,
    seed: int = 0,
    val_fraction: float = 0.15,
    calib_size: int = 128,
) -> Dataset:
    """Load and split a dataset.

    An ``.npz`` file or a plugin's dict holds ``x_train``, ``y_train``, ``x_test``, ``y_test``,
    optionally ``x_val`` and ``y_val``, and optionally ``class_names``, one per class in label
    order (the class indices as strings without it).

    Args:
        source: ``digits``, a path to an ``.npz`` file, or ``package.module:function``.
        seed: Seed of every split.
        val_fraction: Share of train held out for validation when the source has no val split.
        calib_size: Size of the calibration subset drawn from train.

    Returns:
        The split, standardised dataset.

    Raises:
        DataError: The source is unknown, missing or malformed; the message names the problem.
    """
    arrays = _read_source(source, seed=seed)
    _validate(arrays, source)
    if "x_val" not in arrays:
        arrays["x_train"], arrays["x_val"], arrays["y_train"], arrays["y_val"] = _split(
            arrays["x_train"], arrays["y_train"], val_fraction, seed
        )
    _check_classes(arrays, source)
    return _finish(source, arrays, seed=seed, calib_size=calib_size)


@lru_cache(maxsize=4)
def cached_dataset(source: str, seed: int) -> Dataset:
    """Load a dataset once per process (see :func:`load_dataset`)."""
    return load_dataset(source, seed=seed)


def check_source_form(source: str) -> None:
    """Check that ``source`` names a dataset in a known form, without reading it.

    Raises:
        DataError: It is neither a built-in name, an ``.npz`` path nor ``module:function``.
    """
    if source not in BUILTIN_DATASETS and not source.endswith(".npz") and ":" not in source:
        raise DataError(
            f"unknown dataset {source!r}: use one of {list(BUILTIN_DATASETS)}, "
            "a path to an .npz file, or 'package.module:function'"
        )


def _read_source(source: str, *, seed: int) -> dict[str, np.ndarray]:
    check_source_form(source)
    if source == "digits":
        return _digits(seed)
    if source.endswith(".npz"):
        return _npz(Path(source))
    return _plugin(source)


def _digits(seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = bunch.images.astype(np.float32)[:, None, :, :]
    x_train, x_test, y_train, y_test = _split(x, bunch.target, 0.2, seed)
    return {
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "class_names": bunch.target_names,
    }


def _npz(path: Path) -> dict[str, np.ndarray]:
    resolved = path.expanduser().resolve()
    if not resolved.is_file():
        raise DataError(f"dataset file {str(path)!r} does not exist")
    try:
        with np.load(resolved, allow_pickle=False) as npz:
            return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DataError(f"dataset file {str(path)!r} is not a readable .npz: {e}") from e


def _plugin(source: str) -> dict[str, np.ndarray]:
    module_name, _, function_name = source.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as e:
        raise DataError(f"dataset plugin {source!r} cannot be imported: {e}") from e
    try:
        result = function()
    except Exception as e:  # the plugin's own failure, reported as the dataset's
        raise DataError(f"dataset plugin {source!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(result, dict):
        raise DataError(
            f"dataset plugin {source!r} must return a dict with keys {list(_REQUIRED_KEYS)}"
        )
    try:
        return {key: np.asarray(value) for key, value in result.items()}
    except ValueError as e:  # e.g. ragged lists
        raise DataError(
            f"dataset plugin {source!r} returned values that are not arrays: {e}"
        ) from e


def _validate(arrays: dict[str, np.ndarray], source: str) -> None:
    missing = [key for key in _REQUIRED_KEYS if key not in arrays]
    if missing:
        raise DataError(f"dataset {source!r} lacks arrays {missing}; found {sorted(arrays)}")
    has_val = ("x_val" in arrays, "y_val" in arrays)
    if any(has_val) and not all(has_val):
        raise DataError(f"dataset {source!r} must give both x_val and y_val, or neither")
    sample_shape = arrays["x_train"].shape[1:]
    for split in ("train", "val", "test"):
        if f"x_{split}" not in arrays:
            continue
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim < 2 or x.shape[0] == 0:
            raise DataError(
                f"x_{split} of {source!r} must be (N, *features) with N > 0, got {x.shape}"
            )
        if x.shape[1:] != sample_shape:
            raise DataError(
                f"x_{split} of {source!r} has sample shape {x.shape[1:]}, x_train has {sample_shape}"
            )
        if y.ndim != 1 or len(y) != len(x):
            raise DataError(
                f"y_{split} of {source!r} must be 1-D with one label per sample: "
                f"{len(x)} samples in x_{split}, y_{split} has shape {y.shape}"
            )
        _check_inputs(x, f"x_{split}", source)
        _check_label_values(y, f"y_{split}", source)


def _check_inputs(x: np.ndarray, key: str, source: str) -> None:
    """Numeric, finite inputs of a size within the settings."""
    from automl.settings import get_settings

    settings = get_settings()
    numeric = np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)
    if x.dtype == np.bool_ or not numeric:
        raise DataError(
            f"{key} of {source!r} has dtype {x.dtype}; inputs must be integer or float numbers"
        )
    features = int(np.prod(x.shape[1:]))
    if len(x) > settings.data_max_samples or features > settings.data_max_features:
        raise DataError(
            f"{key} of {source!r} has {len(x)} samples of {features} features; at most "
            f"{settings.data_max_samples} and {settings.data_max_features} are allowed "
            "(AUTOML_DATA_MAX_SAMPLES, AUTOML_DATA_MAX_FEATURES)"
        )
    if np.issubdtype(x.dtype, np.floating):
        bad = ~np.isfinite(x)
        if bad.any():
            first = np.argwhere(bad)[0]
            raise DataError(
                f"{key} of {source!r} has {int(bad.sum())} values that are NaN or infinite, "
                f"the first at index {tuple(int(i) for i in first)} ({x[tuple(first)]}); "
                "replace or drop them"
            )


def _check_label_values(y: np.ndarray, key: str, source: str) -> None:
    """Integer labels in ``0..K-1`` with K within the settings."""
    from automl.settings import get_settings

    if y.dtype == np.bool_ or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{key} of {source!r} has dtype {y.dtype}; labels must be integers 0..K-1")
    most = get_settings().data_max_classes
    if y.min() < 0 or y.max() >= most:
        raise DataError(
            f"{key} of {source!r} holds labels {int(y.min())}..{int(y.max())}; labels must be "
            f"class indices 0..K-1 with K at most {most} (AUTOML_DATA_MAX_CLASSES)"
        )


def _check_classes(arrays: dict[str, np.ndarray], source: str) -> None:
    """At least two classes in train, and no validation or test class that train lacks."""
    trained = np.unique(arrays["y_train"])
    if len(trained) < 2:
        raise DataError(
            f"y_train of {source!r} holds one class ({trained.tolist()}): a classifier needs "
            "at least two"
        )
    for key in ("y_val", "y_test"):
        unseen = np.setdiff1d(np.unique(arrays[key]), trained)
        if unseen.size:
            raise DataError(
                f"{key} of {source!r} holds classes {unseen.tolist()[:10]} that y_train lacks: "
                "a model cannot learn them; move some of their samples into train"
            )


def _split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> list[np.ndarray]:
    try:
        return train_test_split(x, y, test_size=fraction, random_state=seed, stratify=y)
    except ValueError:  # a class with a single sample cannot be stratified
        return train_test_split(x, y, test_size=fraction, random_state=seed)


def _finish(source: str, arrays: dict[str, np.ndarray], *, seed: int, calib_size: int) -> Dataset:
    raw_train = arrays["x_train"]
    # float32 statistics and float32 arithmetic: the formula a deployment applies, exactly.
    mean = np.float32(raw_train.mean())
    std = np.float32(raw_train.std())
    std = std if std > 0 else np.float32(1.0)
    out = {
        key: (value.astype(np.float32) - mean) / std
        if key.startswith("x_")
        else value.astype(np.int64)
        for key, value in arrays.items()
        if key in (*_REQUIRED_KEYS, "x_val", "y_val")
    }
    rng = np.random.default_rng(seed)
    calib_rows = rng.permutation(len(out["x_train"]))[: min(calib_size, len(out["x_train"]))]
    labels = np.concatenate([out["y_train"], out["y_val"], out["y_test"]])
    num_classes = int(labels.max()) + 1
    return Dataset(
        name=source,
        x_calib=out["x_train"][calib_rows],
        num_classes=num_classes,
        input_shape=tuple(int(d) for d in out["x_train"].shape[1:]),
        preprocessing={"standardize": {"mean": float(mean), "std": float(std)}},
        fingerprint=_fingerprint(out, seed),
        class_names=_class_names(arrays.get("class_names"), num_classes, source),
        raw_input={
            "dtype": raw_train.dtype.name,
            "min": raw_train.min().item(),
            "max": raw_train.max().item(),
        },
        **out,
    )


def _class_names(names: np.ndarray | None, num_classes: int, source: str) -> tuple[str, ...]:
    """The dataset's class names as strings, else the class indices as strings."""
    if names is None:
        return tuple(str(i) for i in range(num_classes))
    names = np.asarray(names)
    if names.ndim != 1 or len(names) != num_classes:
        raise DataError(
            f"class_names of {source!r} must name each of the {num_classes} classes "
            f"(labels 0..{num_classes - 1}) once, got shape {names.shape}"
        )
    as_text = tuple(str(n) for n in names.tolist())
    if len(set(as_text)) != num_classes:
        raise DataError(f"class_names of {source!r} repeat a name: {list(as_text)}")
    return as_text


def describe_dataset(data: Dataset) -> dict:
    """What a deployment needs to know of the data a model was trained on, JSON-ready.

    Args:
        data: The loaded dataset.

    Returns:
        ``class_names`` (the name of each logit, in order), ``raw_input`` (dtype, min and max
        of the raw train inputs, before standardisation) and ``preprocessing`` (the
        standardisation's ``mean`` and ``std``, its ``formula`` and its float32 ``dtype``).
    """
    return {
        "class_names": list(data.class_names),
        "raw_input": dict(data.raw_input),
        "preprocessing": {
            **data.preprocessing,
            "formula": (
                "x_model = (float32(x_raw) - mean) / std, computed in float32, then cast to "
                "the model input's dtype"
            ),
            "dtype": "float32",
        },
    }


def _fingerprint(arrays: dict[str, np.ndarray], seed: int) -> str:
    digest = hashlib.sha256(f"seed={seed}".encode())
    for key in sorted(arrays):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key]).tobytes())
    return digest.hexdigest()[:16]
