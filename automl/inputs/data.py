"""Datasets: the built-in ``digits``, user ``.npz`` files and ``module:function`` plugins.

Every dataset is split deterministically by seed into train / val / test, plus a calibration
subset for static quantization that is drawn from train, never from test. Feature inputs are
standardised with the train split's mean and std, which are recorded as preprocessing:
``x_model = (float32(x_raw) - mean) / std``, computed in float32, with ``mean`` and ``std``
float32 values (or arrays that broadcast against one sample), so that a deployment reproduces
the model's inputs bit for bit. The statistics fit the layout (see :data:`STANDARDIZE_MODES`):
per feature for (N, F), per channel for (N, C, ...), computed on train only.

A dataset that gives ``vocab_size`` (a scalar, beside the arrays) holds token ids: its ``x``
are integer arrays (N, L) with ids in ``[0, vocab_size)``, kept as int64 and never
standardised. Integer ``x`` without ``vocab_size`` are numbers (pixel values, counts), and are
standardised like floats.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from automl.errors import DataError
from automl.inputs._checks import (
    CALIB_ROWS,
    REQUIRED_KEYS,
    VOCAB_KEY,
    check_classes,
    check_tokens,
    encode_labels,
    validate,
)
from automl.inputs._checks import vocab_size as read_vocab_size
from automl.inputs._npz import read_npz
from automl.plugins import import_plugin

if TYPE_CHECKING:
    from collections.abc import Callable

BUILTIN_DATASETS = ("digits",)
# How float inputs are standardised: ``auto`` picks the layout's mode, per_feature for (N, F)
# and per_channel for (N, C, ...); ``scalar`` is one mean and std; ``none`` feeds them as given.
STANDARDIZE_MODES = ("auto", "none", "scalar", "per_feature", "per_channel")
# The trial user attr holding :func:`describe_dataset` of the data the trial ran on.
DESCRIPTION_ATTR = "data_description"
# The float64 temporaries of the standardisation's statistics take at most this, a block of rows.
_BLOCK_BYTES = 16 * 2**20
# One load at a time in a process: AUTOML_DATA_MAX_MB bounds one load, and the REST service
# checks concurrent submissions' datasets in its threads. Re-entrant: a plugin may load one.
_ONE_LOAD_AT_A_TIME = threading.RLock()


@dataclass(frozen=True)
class Dataset:
    """Inputs of shape (N, *input_shape) and int64 labels, split; features standardised.

    ``input_dtype`` is ``float32`` for standardised features, ``int64`` for token ids, whose
    ids lie in ``[0, vocab_size)`` (``vocab_size`` is None for features).
    """

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
    input_dtype: str = "float32"
    vocab_size: int | None = None

    @property
    def is_tokens(self) -> bool:
        """Whether the inputs are token ids (they have a vocabulary)."""
        return self.vocab_size is not None


def load_dataset(
    source: str,
    *,
    seed: int = 0,
    val_fraction: float = 0.15,
    calib_size: int = CALIB_ROWS,
    standardize: str = "auto",
    name: str | None = None,
) -> Dataset:
    """Load and split a dataset.

    An ``.npz`` file or a plugin's dict holds ``x_train``, ``y_train``, ``x_test``, ``y_test``,
    optionally ``x_val`` and ``y_val``, optionally ``class_names``, one per class in label
    order (the class indices as strings without it), and ``vocab_size`` for token ids. Labels
    are class indices ``0..K-1``, or class names (strings, or True/False): these are mapped to
    indices in the order of ``class_names``, or sorted where it is not given.

    Args:
        source: ``digits``, a path to an ``.npz`` file, or ``package.module:function``.
        seed: Seed of every split.
        val_fraction: Share of train held out for validation when the source has no val split.
        calib_size: Size of the calibration subset drawn from train.
        standardize: How float features are standardised, one of :data:`STANDARDIZE_MODES`;
            ``none`` feeds them as given (as float32), for a trained model that expects its
            own preprocessing.
        name: How the user named the data, for messages and views (e.g. ``dataset`` for
            in-memory arrays); ``source`` by default.

    Returns:
        The split dataset, its features standardised (token ids are kept as they are).

    Raises:
        DataError: The source is unknown, missing or malformed; the message names the problem.
    """
    name = name or source
    if standardize not in STANDARDIZE_MODES:
        raise DataError(f"standardize {standardize!r} is not one of {list(STANDARDIZE_MODES)}")
    with _ONE_LOAD_AT_A_TIME:
        arrays = _read_source(source, seed=seed, name=name)
        return _split_and_finish(arrays, name, seed, val_fraction, calib_size, standardize)


def _split_and_finish(
    arrays: dict[str, np.ndarray],
    name: str,
    seed: int,
    val_fraction: float,
    calib_size: int,
    standardize: str,
) -> Dataset:
    """:func:`load_dataset` once the arrays are read."""
    vocab_size = read_vocab_size(arrays.pop(VOCAB_KEY, None), name)
    encode_labels(arrays, name)  # class names given as labels become class indices
    validate(arrays, name)
    if vocab_size is not None:
        check_tokens(arrays, name, vocab_size)
    if "x_val" not in arrays:
        arrays["x_train"], arrays["x_val"], arrays["y_train"], arrays["y_val"] = _split(
            arrays["x_train"], arrays["y_train"], val_fraction, seed
        )
    check_classes(arrays, name)
    if vocab_size is not None:
        return _finish_tokens(name, arrays, vocab_size, seed=seed, calib_size=calib_size)
    return _finish(name, arrays, seed=seed, calib_size=calib_size, standardize=standardize)


@lru_cache(maxsize=4)
def cached_dataset(
    source: str, seed: int, standardize: str = "auto", name: str | None = None
) -> Dataset:
    """Load a dataset once per process (see :func:`load_dataset`)."""
    return load_dataset(source, seed=seed, standardize=standardize, name=name)


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


def _read_source(source: str, *, seed: int, name: str) -> dict[str, np.ndarray]:
    check_source_form(source)
    if source == "digits":
        return _digits(seed)
    if source.endswith(".npz"):
        return read_npz(Path(source), name)
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


def _plugin(source: str) -> dict[str, np.ndarray]:
    function = import_plugin(source, "dataset plugin", DataError)
    try:
        result = function()
    except Exception as e:  # the plugin's own failure, reported as the dataset's
        raise DataError(f"dataset plugin {source!r} failed: {type(e).__name__}: {e}") from e
    if not isinstance(result, dict):
        raise DataError(
            f"dataset plugin {source!r} must return a dict with keys {list(REQUIRED_KEYS)}"
        )
    try:
        return {key: np.asarray(value) for key, value in result.items()}
    except ValueError as e:  # e.g. ragged lists
        raise DataError(
            f"dataset plugin {source!r} returned values that are not arrays: {e}"
        ) from e


def _split(x: np.ndarray, y: np.ndarray, fraction: float, seed: int) -> list[np.ndarray]:
    from sklearn.model_selection import train_test_split  # scikit-learn takes ~1 s to import

    try:
        return train_test_split(x, y, test_size=fraction, random_state=seed, stratify=y)
    except ValueError:  # a class with a single sample cannot be stratified
        return train_test_split(x, y, test_size=fraction, random_state=seed)


def _finish(
    source: str, arrays: dict[str, np.ndarray], *, seed: int, calib_size: int, standardize: str
) -> Dataset:
    mode, mean, std = _statistics(arrays["x_train"], standardize)

    def standardized(x: np.ndarray) -> np.ndarray:
        # float32 statistics and float32 arithmetic: the formula a deployment applies, exactly,
        # in place on the one float32 copy.
        out = x.astype(np.float32)
        out -= mean
        out /= std
        return out

    return _dataset(
        source, arrays, standardized, seed=seed, calib_size=calib_size,
        kind=f"standardize={mode}",
        preprocessing={"standardize": {"mode": mode, "mean": _plain(mean), "std": _plain(std)}},
    )  # fmt: skip


def _statistics(x: np.ndarray, mode: str) -> tuple[str, np.ndarray, np.ndarray]:
    """The mode that ``mode`` resolves to, and the float32 mean and std of ``x`` (train) under
    it, shaped to broadcast against one sample; a constant feature gets std 1."""
    if mode == "auto":
        mode = "per_feature" if x.ndim == 2 else "per_channel"
    if mode == "none":
        return mode, np.float32(0.0), np.float32(1.0)
    axes = {
        "scalar": None,
        "per_feature": 0,
        "per_channel": (0, *range(2, x.ndim)),
    }[mode]
    mean = x.mean(axis=axes, dtype=np.float64, keepdims=True)  # accumulated without a copy
    std = _std(x, mean, axes)
    if axes is None:
        mean, std = mean.reshape(()), std.reshape(())
    else:
        mean, std = mean[0], std[0]  # one sample's shape: (F,), or (C, 1, ...)
    std = np.where(std > 0, std, 1.0)
    return mode, np.asarray(mean, dtype=np.float32), np.asarray(std, dtype=np.float32)


def _std(x: np.ndarray, mean: np.ndarray, axes: int | tuple[int, ...] | None) -> np.ndarray:
    """The float64 std of ``x`` over ``axes`` (which include the rows), by blocks of rows:
    ``np.std`` would hold a float64 copy of all of ``x``, 8 bytes a value."""
    squares = np.zeros_like(mean)
    rows = max(1, _BLOCK_BYTES // max(1, 8 * x[0].size))
    for start in range(0, len(x), rows):
        deviations = x[start : start + rows] - mean
        deviations *= deviations
        squares += deviations.sum(axis=axes, keepdims=True)
    return np.sqrt(squares / (x.size // max(1, mean.size)))


def _plain(values: np.ndarray) -> float | list:
    """A statistic as JSON: a number where it is one value, else nested lists."""
    return values.item() if values.size == 1 else values.tolist()


def _finish_tokens(
    source: str, arrays: dict[str, np.ndarray], vocab_size: int, *, seed: int, calib_size: int
) -> Dataset:
    return _dataset(
        source, arrays, lambda x: x.astype(np.int64), seed=seed, calib_size=calib_size,
        kind=f"{VOCAB_KEY}={vocab_size}", preprocessing={"tokens": {VOCAB_KEY: vocab_size}},
        input_dtype="int64", vocab_size=vocab_size,
    )  # fmt: skip


def _splits(arrays: dict[str, np.ndarray], inputs: Callable) -> dict[str, np.ndarray]:
    """The split arrays: ``inputs`` applied to each x, labels as int64. Each array leaves
    ``arrays`` as it is converted, so that its memory is freed before the next is made."""
    return {
        key: inputs(arrays.pop(key)) if key.startswith("x_") else arrays.pop(key).astype(np.int64)
        for key in (*REQUIRED_KEYS, "x_val", "y_val")
    }


def _dataset(
    source: str, arrays: dict[str, np.ndarray], inputs: Callable, *, seed: int,
    calib_size: int, kind: str, **fields: object,
) -> Dataset:  # fmt: skip
    """The Dataset of the raw splits ``arrays``, its inputs converted by ``inputs``; ``kind``
    names the conversion in the fingerprint."""
    train = arrays["x_train"]  # raw, before _splits frees it
    raw_input = {"dtype": train.dtype.name, "min": train.min().item(), "max": train.max().item()}
    del train
    out = _splits(arrays, inputs)
    fields["fingerprint"] = _fingerprint(out, seed, kind)
    rng = np.random.default_rng(seed)
    calib_rows = rng.permutation(len(out["x_train"]))[: min(calib_size, len(out["x_train"]))]
    labels = np.concatenate([out["y_train"], out["y_val"], out["y_test"]])
    num_classes = int(labels.max()) + 1
    names = arrays.get("class_names")
    if names is not None and np.ndim(names) == 1 and len(names) > num_classes:
        # Classes above every label: another model (more logits), so other data to the cache.
        num_classes = len(names)
        tagged = f"{fields['fingerprint']}|classes={num_classes}"
        fields["fingerprint"] = hashlib.sha256(tagged.encode()).hexdigest()[:16]
    return Dataset(
        name=source,
        x_calib=out["x_train"][calib_rows],
        num_classes=num_classes,
        input_shape=tuple(int(d) for d in out["x_train"].shape[1:]),
        class_names=_class_names(names, num_classes, source),
        raw_input=raw_input,
        **fields,
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
        of the raw train inputs, before standardisation) and ``preprocessing``: for features,
        the standardisation's ``mean`` and ``std``, its ``formula`` and its float32 ``dtype``;
        for token ids, the ``vocab_size``, a ``formula`` saying they are fed as they are, and
        the int64 ``dtype``.
    """
    if data.is_tokens:
        formula = "x_model = int64(token ids), not standardised; ids lie in [0, vocab_size)"
    else:
        formula = (
            "x_model = (float32(x_raw) - mean) / std, computed in float32, with mean and std "
            "float32 numbers or arrays that broadcast against one sample"
        )
    return {
        "class_names": list(data.class_names),
        "raw_input": dict(data.raw_input),
        "preprocessing": {**data.preprocessing, "formula": formula, "dtype": data.input_dtype},
    }


def _fingerprint(arrays: dict[str, np.ndarray], seed: int, kind: str = "") -> str:
    digest = hashlib.sha256(f"seed={seed}{kind}".encode())
    for key in sorted(arrays):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(arrays[key]))  # its buffer: tobytes() would copy
    return digest.hexdigest()[:16]
