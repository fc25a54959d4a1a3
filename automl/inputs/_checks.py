"""Checks of a dataset's arrays, before it is split: each names the array and what to do."""

from __future__ import annotations

import math
import zipfile
from typing import TYPE_CHECKING

import numpy as np

from automl.errors import DataError

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

REQUIRED_KEYS = ("x_train", "y_train", "x_test", "y_test")
LABEL_KEYS = ("y_train", "y_val", "y_test")
# Every array a dataset may hold; an .npz's other members are never read.
DATASET_KEYS = (*REQUIRED_KEYS, "x_val", "y_val", "class_names", "vocab_size")
# The key that marks token ids, and the largest vocabulary an embedding table is built for.
VOCAB_KEY = "vocab_size"
_MAX_VOCAB = 1_000_000
# Rows of train in the calibration subset for static quantization.
CALIB_ROWS = 128
# What loading holds per sample beside its inputs: its int64 label, and two int64 temporaries
# (the labels of all splits together, the permutation that draws the calibration rows).
_ROW_BYTES = 24
# What scikit-learn's stratified split holds per row of train (Python integers: 67 measured).
_SPLIT_ROW_BYTES = 80


def validate(arrays: dict[str, np.ndarray], source: str) -> None:
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
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


def check_headers(
    archive: zipfile.ZipFile, source: str, keys: Collection[str]
) -> dict[str, zipfile.ZipInfo]:
    """Check the arrays ``keys`` of an ``.npz`` against the size limits, reading only each
    member's header: a small compressed file may hold arrays of gigabytes. The other members
    are never read.

    Sizes are Python integers (numpy's products wrap around), and a header must say what its
    member holds, so that no crafted header hides an array from the limits. Each key must
    name one member (``x_train`` or ``x_train.npy``): numpy would read another than the one
    checked.

    Returns:
        The member of each key found, the one to read.

    Raises:
        DataError: Two members have one key; a header is unreadable, has a negative dimension
            or disagrees with its member's size; an array holds Python objects or is larger
            than the settings allow; or loading the arrays would take more than
            ``AUTOML_DATA_MAX_MB`` (see :func:`load_bytes`).
    """
    from automl.settings import get_settings

    members: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        key = info.filename.removesuffix(".npy")
        if key in keys and key in members:
            raise DataError(
                f"dataset {source!r} holds two arrays named {key} ({members[key].filename} "
                f"and {info.filename}): write it again with numpy.savez"
            )
        if key in keys:
            members[key] = info
    headers = {key: _header(archive, info, key, source) for key, info in members.items()}
    stored = sum(math.prod(shape) * itemsize for shape, itemsize in headers.values())
    need, most = load_bytes(headers, stored), get_settings().data_max_mb
    if need > most * 1e6:
        raise DataError(
            f"the arrays of {source!r} take {stored / 1e6:.0f} MB once decompressed and "
            f"{need / 1e6:.0f} MB of memory to load (features as float32, token ids and labels "
            f"as int64); at most {most:g} MB are allowed (AUTOML_DATA_MAX_MB)"
        )
    return members


def load_bytes(headers: Mapping[str, tuple[tuple[int, ...], int]], stored: int) -> int:
    """The most memory, in bytes, that loading a dataset of these arrays holds at once.

    The load keeps the file's arrays (``stored`` bytes) until it has converted each, and beside
    them the larger of: the model-ready arrays (float32 features or int64 token ids, a
    calibration subset of train, and per sample its int64 label and two int64 temporaries);
    and, without ``x_val``, the copy of train that splitting validation off it makes, with
    scikit-learn's stratified split's own per row.

    Args:
        headers: Each array's shape and item size, by key.
        stored: The bytes of all the arrays as the file holds them.
    """
    x_itemsize = 8 if VOCAB_KEY in headers else 4
    ready = split = 0
    for key, (shape, _) in headers.items():
        if key.startswith("x_") and shape:
            ready += math.prod(shape) * x_itemsize + shape[0] * _ROW_BYTES
    train = headers.get("x_train", ((), 0))[0]
    if train:
        ready += min(CALIB_ROWS, train[0]) * math.prod(train[1:]) * x_itemsize
    if train and "x_val" not in headers:
        labels, itemsize = headers.get("y_train", ((), 0))
        split = math.prod(train) * headers["x_train"][1] + math.prod(labels) * itemsize
        split += train[0] * _SPLIT_ROW_BYTES
    return stored + max(ready, split)


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, source: str) -> tuple:
    """The shape and item size that the header of member ``info`` gives, checked against the
    limits and against the bytes the member holds."""
    with archive.open(info) as member:
        try:
            version = np.lib.format.read_magic(member)
            read = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            shape, _, dtype = read(member)
        except ValueError as e:
            raise DataError(f"{key} of {source!r} is not a readable array: {e}") from None
        start = member.tell()
    crafted = "the file is damaged or crafted: write it again with numpy.savez"
    if any(size < 0 for size in shape):
        raise DataError(f"{key} of {source!r} has the shape {shape} in its header; {crafted}")
    if dtype.hasobject:
        labels = " (or class names as strings: y.astype(str))" if key.startswith("y_") else ""
        raise DataError(f"{key} of {source!r} holds Python objects; save numbers{labels}")
    size = math.prod(shape) * dtype.itemsize
    if info.file_size != start + size:
        raise DataError(
            f"{key} of {source!r} holds {info.file_size - start} bytes, but its header says "
            f"{shape} of {dtype} ({size} bytes); {crafted}"
        )
    if key.startswith(("x_", "y_")) and shape:
        _check_size(shape[0], math.prod(shape[1:]), key, source)
    if key == "class_names":
        _check_class_names(math.prod(shape), source)
    return shape, dtype.itemsize


def _check_size(samples: int, features: int, key: str, source: str) -> None:
    from automl.settings import get_settings

    settings = get_settings()
    if samples > settings.data_max_samples or features > settings.data_max_features:
        raise DataError(
            f"{key} of {source!r} has {samples} samples of {features} features; at most "
            f"{settings.data_max_samples} and {settings.data_max_features} are allowed "
            "(AUTOML_DATA_MAX_SAMPLES, AUTOML_DATA_MAX_FEATURES)"
        )


def _check_class_names(count: int, source: str) -> None:
    """No more class names than the settings allow classes: each becomes a Python string."""
    from automl.settings import get_settings

    most = get_settings().data_max_classes
    if count > most:
        raise DataError(
            f"class_names of {source!r} holds {count} names; at most {most} classes are "
            "allowed (AUTOML_DATA_MAX_CLASSES)"
        )


def _check_inputs(x: np.ndarray, key: str, source: str) -> None:
    """Numeric, finite inputs of a size within the settings."""
    numeric = np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)
    if x.dtype == np.bool_ or not numeric:
        raise DataError(
            f"{key} of {source!r} has dtype {x.dtype}; inputs must be integer or float numbers"
        )
    _check_size(len(x), int(np.prod(x.shape[1:])), key, source)
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

    if np.issubdtype(y.dtype, np.floating) and np.isfinite(y).all() and (y == y.round()).all():
        raise DataError(
            f"{key} of {source!r} holds whole numbers as {y.dtype}; labels are class indices "
            "0..K-1 (or class names as strings): give y.astype(int)"
        )
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(
            f"{key} of {source!r} has dtype {y.dtype}; labels must be integer class indices "
            "0..K-1 or class names (strings): automl searches classifiers, and a continuous "
            "target (regression) is not supported"
        )
    most = get_settings().data_max_classes
    if y.min() < 0 or y.max() >= most:
        raise DataError(
            f"{key} of {source!r} holds labels {int(y.min())}..{int(y.max())}; labels must be "
            f"class indices 0..K-1 with K at most {most} (AUTOML_DATA_MAX_CLASSES)"
        )


def encode_labels(arrays: dict[str, np.ndarray], source: str) -> None:
    """Turn class names given as labels (strings, or True/False) into class indices, in place.

    The classes are ``class_names`` in its order where the dataset gives it, else the labels'
    distinct values sorted; ``class_names`` is then set to them. Integer labels are left as
    they are.

    Raises:
        DataError: The splits give their labels in different forms, labels are Python objects
            other than strings, or a label is not among the ``class_names`` given.
    """
    forms = {key: _label_form(arrays[key], key, source) for key in LABEL_KEYS if key in arrays}
    if set(forms.values()) <= {"indices"}:
        return
    if len(set(forms.values())) > 1:
        raise DataError(
            f"the labels of {source!r} come in different forms ({forms}): give every split's "
            "labels as class names (strings), or all as class indices 0..K-1"
        )
    labels = {key: np.asarray(arrays[key]).astype(str) for key in forms}
    names = np.unique(np.concatenate([y.ravel() for y in labels.values()]))
    if "class_names" in arrays:
        names = np.asarray(arrays["class_names"]).astype(str)
        if names.ndim != 1:
            raise DataError(f"class_names of {source!r} must be 1-D, got shape {names.shape}")
    for key, y in labels.items():
        unnamed = np.setdiff1d(y, names)
        if unnamed.size:
            raise DataError(
                f"{key} of {source!r} holds labels {unnamed.tolist()[:10]} that class_names "
                f"{names.tolist()[:10]} does not name: name every class, or leave class_names "
                "out to take the labels' names, sorted"
            )
    order = np.argsort(names, kind="stable")
    for key, y in labels.items():
        arrays[key] = order[np.searchsorted(names, y, sorter=order)].astype(np.int64)
    arrays["class_names"] = names


def _label_form(y: np.ndarray, key: str, source: str) -> str:
    """``indices`` (numbers), ``names`` (strings) or ``booleans``; refuses other objects."""
    if y.dtype == np.bool_:
        return "booleans"
    if y.dtype.kind in "US":
        return "names"
    if y.dtype.hasobject:
        types = sorted({type(v).__name__ for v in y.ravel().tolist()})
        if types == ["str"]:
            return "names"
        raise DataError(
            f"{key} of {source!r} holds Python objects of types {types}; labels are class "
            "indices 0..K-1 or class names: give integers or strings (y.astype(str))"
        )
    return "indices"


def vocab_size(value: np.ndarray | None, source: str) -> int | None:
    """The dataset's ``vocab_size``: None, or an integer scalar in 2..``_MAX_VOCAB``."""
    if value is None:
        return None
    value = np.asarray(value)
    if value.ndim != 0 or not np.issubdtype(value.dtype, np.integer):
        raise DataError(
            f"{VOCAB_KEY} of {source!r} must be one integer (the number of token ids), got "
            f"{value.dtype} of shape {value.shape}"
        )
    if not 2 <= int(value) <= _MAX_VOCAB:
        raise DataError(f"{VOCAB_KEY} of {source!r} must be in 2..{_MAX_VOCAB}, got {int(value)}")
    return int(value)


def check_tokens(arrays: dict[str, np.ndarray], source: str, vocab_size: int) -> None:
    """Token ids: integer arrays (N, L) with every id in ``[0, vocab_size)``."""
    for key in ("x_train", "x_val", "x_test"):
        if key not in arrays:
            continue
        x = arrays[key]
        if not np.issubdtype(x.dtype, np.integer) or x.ndim != 2:
            raise DataError(
                f"{key} of {source!r} is {x.dtype} of shape {x.shape}, but {VOCAB_KEY} marks "
                "token ids: give integer ids of shape (N, L), or drop vocab_size for features"
            )
        if x.min() < 0 or x.max() >= vocab_size:
            raise DataError(
                f"{key} of {source!r} holds token ids {int(x.min())}..{int(x.max())}, outside "
                f"the vocabulary 0..{vocab_size - 1}: raise {VOCAB_KEY} to {int(x.max()) + 1} "
                "or more, or fix the ids"
            )


def check_classes(arrays: dict[str, np.ndarray], source: str) -> None:
    """At least two classes in train, no label of ``0..max`` without a sample (unless
    ``class_names`` names them), and no validation or test class that train lacks."""
    trained = np.unique(arrays["y_train"])
    if len(trained) < 2:
        raise DataError(
            f"y_train of {source!r} holds one class ({trained.tolist()}): a classifier needs "
            "at least two"
        )
    labels = np.unique(np.concatenate([arrays[k] for k in ("y_train", "y_val", "y_test")]))
    absent = np.setdiff1d(np.arange(int(labels.max()) + 1), labels)
    if absent.size and "class_names" not in arrays:
        shifted = " (labels from 1 look 1-based: subtract 1)" if absent.tolist() == [0] else ""
        raise DataError(
            f"the labels of {source!r} run to {int(labels.max())} but no sample has class(es) "
            f"{absent.tolist()[:10]}{shifted}: labels are class indices 0..K-1, one logit "
            "each. Relabel, or give class_names naming every class to keep the gap"
        )
    for key in ("y_val", "y_test"):
        unseen = np.setdiff1d(np.unique(arrays[key]), trained)
        if unseen.size:
            raise DataError(
                f"{key} of {source!r} holds classes {unseen.tolist()[:10]} that y_train lacks: "
                "a model cannot learn them; move some of their samples into train"
            )
