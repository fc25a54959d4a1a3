"""A trained model's checks at load: it loads, runs on the data, exports, and beats chance.

Each failure is a one-line :class:`~automl.errors.SpecError` naming the model and what to do;
nothing of the study has run yet.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy import stats

from automl.catalog.methods import pre_process
from automl.catalog.runtimes._ort import feed, input_dtype, input_name, make_session
from automl.errors import InputRefused, SpecError, UnsupportedQuantization, host_trouble
from automl.inputs.data import cached_dataset
from automl.inputs.onnx_model import OnnxModel, open_onnx
from automl.inputs.trained_model import FactoryUnavailable, TrainedModel, open_trained
from automl.models import find_output_layer
from automl.pipeline.evaluate import evaluate
from automl.pipeline.export import compare_logits, export_onnx
from automl.pipeline.profile import SourceGraph
from automl.search.space import load_space

if TYPE_CHECKING:
    import onnxruntime as ort
    from torch import nn

    from automl.inputs.data import Dataset
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec

logger = logging.getLogger("automl.trials.model_check")
# A baseline is refused as at chance when chance would reach its accuracy this rarely or more.
CHANCE_P_VALUE = 1e-3
# Models that passed in this process, by model spec, file digest and data fingerprint.
_PASSED: dict[tuple[str, str, str], CheckedModel] = {}


@dataclass(frozen=True)
class CheckedModel:
    """A trained model that passed its checks, and the layers of its fp32 graph (see
    :func:`count_layers`)."""

    model: TrainedModel | OnnxModel
    layers: int

    def resolve(self, space: SearchSpace) -> SearchSpace:
        """``space`` resolved for this model (see :meth:`SearchSpace.for_model`).

        Raises:
            InputRefused: Every ``keep_fp32`` of the space keeps all of the model's layers.
        """
        try:
            return space.for_model(self.layers)
        except SpecError as e:  # wrong wherever the study runs
            raise InputRefused(str(e)) from None


def check_study_model(spec: StudySpec) -> None:
    """Check a trained model's study before it is created (see :func:`check_trained_model`),
    and its space for the model (see :meth:`CheckedModel.resolve`); a study that trains its own
    models passes."""
    if spec.model is not None:
        checked = check_trained_model(spec, cached_dataset(**spec.data_args))
        checked.resolve(load_space(spec.search_space))


def check_trained_model(spec: StudySpec, data: Dataset) -> CheckedModel:
    """Load the study's trained model, find its output layer, export it and score it once;
    or prepare its ONNX model (see :meth:`OnnxModel.prepare`) and score that.

    Returns:
        The trained model, with its output layer (the one named, or the one found), or the
        ONNX model; with its layer count.

    Raises:
        SpecError: The weights file is missing or unreadable here, or the factory cannot be
            imported here (other hosts may have them).
        InputRefused: The weights are no state dict or do not fit the factory's model, the model
            does not take the data or give one logit per class, it cannot be exported to
            ONNX, or its validation accuracy is not clearly above chance.
    """
    assert spec.model is not None
    given = spec.model
    if given.is_onnx:  # a missing or unreadable file is this host's: others may have it
        model, check = open_onnx(given.weights, given.output), _checked_onnx
    else:
        opened = open_trained(given.factory, given.weights, given.output_layer, given.output)
        model, check = opened, _checked
    # `study start` checks before it creates the study, and its loop once more: once will do.
    key = (given.model_dump_json(), model.digest, data.fingerprint)
    if key not in _PASSED:
        try:
            _PASSED[key] = check(model, spec, data)
        except (InputRefused, FactoryUnavailable):  # refused already, or this host's to fix
            raise
        except SpecError as e:
            raise InputRefused(str(e)) from None
    return _PASSED[key]


def _checked(trained: TrainedModel, spec: StudySpec, data: Dataset) -> CheckedModel:
    given = spec.model
    assert given is not None
    model = trained.build()
    inputs = torch.from_numpy(data.x_val[:2])
    _check_outputs(model, inputs, data, given.factory)
    layer = trained.output_layer or _found_layer(trained, model, inputs)
    trained = replace(trained, output_layer=layer)
    try:
        model.get_submodule(trained.pruning_layer)
    except AttributeError:
        raise SpecError(
            f"model {given.factory!r} has no layer {layer!r} (its top-level layers: "
            f"{[n for n, _ in model.named_children()]}); name the layer that gives the logits "
            "with model.output_layer (--output-layer), or leave it out to have it found"
        ) from None
    accuracies, layers = _exported_figures(model, data, given.label)
    _check_accuracy(accuracies, spec, data, given.label)
    return CheckedModel(trained, layers)


def _checked_onnx(model: OnnxModel, spec: StudySpec, data: Dataset) -> CheckedModel:
    """The ONNX model, once its prepared graph runs on the data at any batch and beats chance.

    Raises:
        InputRefused: It does not, naming why.
    """
    name = spec.model.label if spec.model else model.path.name
    with tempfile.TemporaryDirectory(prefix="automl-check-") as tmp:
        path = Path(tmp) / "model.onnx"
        model.prepare(path)
        rows = min(4, len(data.x_val))
        try:
            session = make_session(path, ["CPUExecutionProvider"], 1)
            x = feed(data.x_val[:rows], input_dtype(session))
            together = session.run(None, {input_name(session): x})[0]
            alone = np.concatenate([session.run(None, {input_name(session): x[i : i + 1]})[0]
                                    for i in range(rows)])  # fmt: skip
        except Exception as e:  # ONNX Runtime's errors: a graph it cannot open or run
            raise InputRefused(
                f"ONNX model {name!r} does not open or run in ONNX Runtime on the data (samples "
                f"of shape {data.input_shape}) at batches 1 and {rows}: {type(e).__name__}: {e}"
            ) from None
        if together.shape != (rows, data.num_classes):
            raise InputRefused(
                f"ONNX model {name!r} gives outputs of shape {together.shape[1:]} per sample; "
                f"the data has {data.num_classes} classes, so it must give "
                f"({data.num_classes},) logits"
            )
        fix = "name that output with --model-output (model.output), or export without it"
        refuse_probabilities(together, f"ONNX model {name!r}", fix)
        if not compare_logits(together, alone).holds:
            raise InputRefused(
                f"ONNX model {name!r} gives other logits for a sample in a batch than alone: "
                "its batch axis is not dynamic (e.g. a Reshape to batch 1); export it with a "
                "dynamic batch axis (torch.onnx.export's dynamic_axes)"
            )
        accuracies, layers = _accuracies(session, data), count_layers(path)
    _check_accuracy(accuracies, spec, data, name)
    return CheckedModel(model, layers)


def _check_accuracy(
    accuracies: tuple[float, float], spec: StudySpec, data: Dataset, name: str
) -> None:
    """Refuse a model at chance on the validation split; warn of one below its expected
    accuracy, or clearly better on validation than on test (see :func:`compare_splits`)."""
    accuracy, test_accuracy = accuracies
    check_above_chance(accuracy, data, name)
    expected = spec.model.expected_accuracy if spec.model else None
    if expected is not None:
        _compare_expected(accuracy, expected, len(data.y_val), name)
    compare_splits(accuracy, len(data.y_val), test_accuracy, len(data.y_test), name)


def _check_outputs(model: nn.Module, inputs: torch.Tensor, data: Dataset, name: str) -> None:
    try:
        with torch.no_grad():
            out = model(inputs)
    except SpecError as e:  # the logits could not be picked out of the output
        raise SpecError(f"model {name!r}: {e}") from None
    except Exception as e:  # the user's forward; out of memory here is this host's
        if host_trouble(e):
            raise
        raise SpecError(
            f"model {name!r} cannot run on the data (samples of shape {data.input_shape}): "
            f"{type(e).__name__}: {e}"
        ) from None
    if not isinstance(out, torch.Tensor):
        from automl.models import pick_logits

        try:
            pick_logits(out, None)
        except SpecError as e:
            raise SpecError(f"model {name!r}: {e}") from None
    if tuple(out.shape) != (len(inputs), data.num_classes):
        raise SpecError(
            f"model {name!r} gives outputs of shape {tuple(out.shape)[1:]} per sample; the data "
            f"has {data.num_classes} classes, so it must give ({data.num_classes},) logits"
        )
    refuse_probabilities(out.float().numpy(), f"model {name!r}", "return them from forward")


def refuse_probabilities(out: np.ndarray, model: str, fix: str) -> None:
    """Refuse outputs that are probabilities (a softmax): rows in [0, 1] that sum to 1.

    The export says its output is logits, and deployments apply their own softmax.
    """
    rows = out.reshape(len(out), -1).astype(np.float64)
    if ((rows >= 0) & (rows <= 1)).all() and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3):
        raise SpecError(
            f"{model} outputs probabilities (each row is in [0, 1] and sums to 1: a softmax); "
            f"automl takes the logits before the softmax: {fix}"
        )


def _found_layer(trained: TrainedModel, model: nn.Module, inputs: torch.Tensor) -> str:
    """The output layer found by running the model, in the user's model's names."""
    try:
        found = find_output_layer(model, inputs)
    except SpecError as e:
        raise SpecError(f"model {trained.factory!r}: {e}") from None
    prefix = trained.layer_name("")
    return found.removeprefix(prefix)


def _exported_figures(
    model: nn.Module, data: Dataset, name: str
) -> tuple[tuple[float, float], int]:
    """The validation and test accuracies of the model's fp32 ONNX export, as the baseline
    trial has them, and its layer count (see :func:`count_layers`)."""
    with tempfile.TemporaryDirectory(prefix="automl-check-") as tmp:
        try:
            path = export_onnx(model, data.x_val[:64], Path(tmp) / "model.onnx").path
        except Exception as e:  # TrialFailed, or the exporter's own errors
            if host_trouble(e):  # out of memory, a full temporary folder
                raise
            raise SpecError(
                f"model {name!r} cannot be exported to ONNX: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}"
            ) from None
        session = make_session(path, ["CPUExecutionProvider"], 1)
        return _accuracies(session, data), count_layers(path)


def count_layers(path: Path) -> int:
    """The layers (Conv, Gemm, MatMul) of the fp32 graph at ``path`` as a per-layer method
    counts them: after ONNX Runtime's pre-processing (see
    :func:`automl.pipeline.layer_evidence.layer_evidence`)."""
    with tempfile.TemporaryDirectory(prefix="automl-layers-") as tmp:
        # A graph that ORT's pre-processing fails on runs no per-layer method: count it as is.
        with suppress(UnsupportedQuantization):
            path = pre_process(path, Path(tmp) / "pre.onnx")
        return len(SourceGraph(path).layers)


def _accuracies(session: ort.InferenceSession, data: Dataset) -> tuple[float, float]:
    """A session's accuracy on the validation split and on the test split."""
    return tuple(
        evaluate(session, x, y, num_classes=data.num_classes).accuracy
        for x, y in ((data.x_val, data.y_val), (data.x_test, data.y_test))
    )


def chance_threshold(chance: float, n: int, p_value: float = CHANCE_P_VALUE) -> float:
    """The accuracy on ``n`` samples that a guesser right with probability ``chance`` reaches
    with probability ``p_value``: a model must score above it to be clearly better."""
    return float(stats.binom.isf(p_value, n, chance)) / n


def chance_rate(labels: np.ndarray, num_classes: int) -> float:
    """Chance on ``labels``: a uniform guess among the classes, or always the commonest class
    (what a model that learned nothing of its inputs scores on imbalanced data)."""
    return max(1 / num_classes, float(np.bincount(labels).max()) / len(labels))


def check_above_chance(accuracy: float, data: Dataset, name: str) -> None:
    """Refuse a baseline whose validation accuracy is not clearly above chance.

    Raises:
        SpecError: It is not, with the input range the model saw and the preprocessing hint.
    """
    n = len(data.y_val)
    chance = chance_rate(data.y_val, data.num_classes)
    needed = chance_threshold(chance, n)
    if accuracy > needed:
        return
    raw = data.raw_input
    raise SpecError(
        f"model {name!r} scores {accuracy:.3f} on the {n} validation samples, not clearly above "
        f"chance for {data.num_classes} classes ({chance:.3f}, the better of a uniform guess "
        f"and always the commonest class; above {needed:.3f} is needed, p < "
        f"{CHANCE_P_VALUE:g}), so no speedup or accuracy drop against it would "
        f"mean anything. automl feeds a trained model its inputs as given: here "
        f"{raw.get('dtype')} values from {raw.get('min')} to {raw.get('max')}. Preprocess the "
        "dataset as the model was trained (scaling, normalisation, channel order) and check "
        "that its labels use the model's class order"
    )


def compare_splits(
    val_accuracy: float, n_val: int, test_accuracy: float, n_test: int, name: str
) -> None:
    """Warn when the baseline scores clearly better on validation than on test (Fisher's exact
    test, one-sided, p below :data:`CHANCE_P_VALUE`): the sign of a model trained on its
    validation split, on which the study would then score ``accuracy_drop``."""
    right = (round(val_accuracy * n_val), round(test_accuracy * n_test))
    table = [[right[0], n_val - right[0]], [right[1], n_test - right[1]]]
    if stats.fisher_exact(table, alternative="greater").pvalue < CHANCE_P_VALUE:
        logger.warning(
            "model %r scores %.3f on the %d validation samples but %.3f on the %d test samples: "
            "if it was trained on the validation split (15 %% of x_train unless x_val and y_val "
            "are given), the study scores accuracy_drop on data the model has seen, and "
            "understates what pruning and quantization cost. Give x_val and y_val held out "
            "from its training",
            name, val_accuracy, n_val, test_accuracy, n_test,
        )  # fmt: skip


def _compare_expected(accuracy: float, expected: float, n: int, name: str) -> None:
    """Warn when the baseline scores clearly below the accuracy the user stated."""
    high = stats.binomtest(round(accuracy * n), n).proportion_ci(1 - CHANCE_P_VALUE).high
    if high < expected:
        logger.warning(
            "model %r scores %.3f on the %d validation samples, clearly below the "
            "expected_accuracy %.3f it was given: check that the dataset is preprocessed as "
            "the model was trained",
            name, accuracy, n, expected,
        )  # fmt: skip


def main() -> int:
    """Check the trained model of the spec on standard input (JSON): exit 0, or print why it
    is refused and exit 2. The REST service runs this in a child process, which imports torch
    and ends with the check, so that the web process imports neither."""
    import json
    import sys

    from automl.search.spec import parse_spec

    try:
        check_study_model(parse_spec(json.loads(sys.stdin.read())))
    except SpecError as e:
        print(str(e), end="")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
