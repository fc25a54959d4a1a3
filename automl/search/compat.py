"""Whether a search space, a dataset and a target work together: checked once, before any trial.

A family takes the inputs its layers can: ``mlp`` any float features, the conv families
(C, L) or (C, H, W) floats, ``transformer`` int64 token ids (L,) with a vocabulary. A
user-written family (``package.module:function``) is built, pruned at the space's largest
ratio and exported on a batch of the data, and refused with the stage that failed. The target
must run every method the space can suggest. Each refusal is one line that names the family,
the data's shape and what would work.
"""

from __future__ import annotations

import math
import tempfile
from contextlib import contextmanager
from dataclasses import MISSING, fields
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automl.candidate import OUTPUT_LAYER, ArchConfig
from automl.catalog import FAMILIES, get_backend, input_layout, method_for, per_layer_methods
from automl.catalog.methods.int4_weight import MIN_NBITS_K
from automl.errors import SpecError
from automl.search.params import FloatParam, param_values
from automl.search.space import candidate_from_values, load_space

if TYPE_CHECKING:
    from collections.abc import Iterator

    from automl.inputs.data import Dataset
    from automl.search.params import Param
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec
    from automl.targets import Target

# The user-written families that passed their dry run here: (family, arch, data fingerprint).
_PASSED: set[str] = set()


def check_compatible(space: SearchSpace, data: Dataset, target: Target) -> None:
    """Refuse a space, dataset and target that cannot run together, before any trial.

    Args:
        space: The search space.
        data: The loaded dataset.
        target: Where the study measures latency.

    Raises:
        SpecError: A family of the space cannot take the data's inputs, a user-written family
            fails to build, prune or export, a family's knob values do not fit together, or
            the space suggests a method the target does not run.
    """
    check_target(space, target)
    for family in families(space):
        if family in FAMILIES:
            problem = (
                input_problem(family, data)
                or FAMILIES[family].space_problem(partial(_values_or_default, space))
                or _nbits_problem(space, family, data, target)
            )
            if problem:
                raise SpecError(f"search space {space.name!r}: {problem}")
        else:
            _dry_run(_user_arch(space, family), space, data)


def check_target(space: SearchSpace, target: Target) -> None:
    """Raise ``SpecError`` when the space can suggest a method the target cannot run.

    The ``bits`` knob names methods too: 8 bits is ``int8-static`` (or ``int8-dynamic``, by
    ``int8_mode``), which NVIDIA targets do not run; their 8-bit methods are named.
    """
    unsupported = sorted(space.bit_choices() - set(target.precisions))
    fits = " (the shipped space digits-gpu fits it)" if target.kind == "cuda" else ""
    if unsupported:
        raise SpecError(
            f"search space {space.name!r} suggests bits {unsupported}, which target "
            f"{target.name!r} cannot run; it supports {sorted(target.precisions)}{fits}"
        )
    by_bits = sorted(_bit_methods(space) - set(target.methods))
    if by_bits:
        raise SpecError(
            f"search space {space.name!r} suggests bits that mean methods {by_bits}, which "
            f"target {target.name!r} cannot run; it runs {list(target.methods)}: name them "
            f"with the method knob instead of bits{fits}"
        )
    named = sorted(space.method_choices() - set(target.methods))
    if named:
        raise SpecError(
            f"search space {space.name!r} names methods {named}, which target "
            f"{target.name!r} cannot run; it runs {list(target.methods)}"
        )
    _check_runtimes(space, target)


def _check_runtimes(space: SearchSpace, target: Target) -> None:
    """Refuse runtimes the target does not offer, and methods one of them does not run."""
    for runtime in sorted(space.runtime_choices()):
        lacking = sorted(space_methods(space) - set(target.on_runtime(runtime).methods))
        if lacking:
            raise SpecError(
                f"search space {space.name!r} searches runtime {runtime!r}, which does not run "
                f"methods {lacking}; name only methods that every runtime of the space runs"
            )
        untimed = sorted(space_methods(space) & set(per_layer_methods()))
        if untimed and not get_backend(runtime).profiles:
            raise SpecError(
                f"search space {space.name!r} searches runtime {runtime!r}, which times no "
                f"single layer, with {untimed}, which keep layers by their time; search those "
                "on a runtime with a per-layer profile (ort-cpu)"
            )


def space_methods(space: SearchSpace) -> set[str]:
    """Every quantization method the space can suggest, named or given by ``bits``."""
    return space.method_choices() | _bit_methods(space)


def study_methods(spec: StudySpec) -> list[str]:
    """The methods a study's space can suggest, sorted: their runtimes must be where it runs."""
    return sorted(space_methods(load_space(spec.search_space)))


def _bit_methods(space: SearchSpace) -> set[str]:
    """The methods of the ``bits`` knob (with ``int8_mode``), where the space names none."""
    if space.method_choices():
        return set()
    modes = {str(mode) for mode in space.values_of("int8_mode")} or {"static"}
    return {
        method_for(bits, mode).name
        for bits in space.bit_choices()
        for mode in (modes if bits == 8 else {"static"})
    }


def families(space: SearchSpace) -> list[str]:
    """Every ``arch.family`` the space can suggest (none for a trained model's space)."""
    return [str(v) for v in space.values_of("arch.family")]


def input_problem(family: str, data: Dataset) -> str | None:
    """Why a catalog ``family`` cannot take ``data``'s inputs, with what would; else None."""
    shape, takes = data.input_shape, FAMILIES[family].takes
    layout = input_layout(shape, data.is_tokens)
    if layout in takes:
        return None
    fitting = [name for name, other in FAMILIES.items() if layout in other.takes]
    if data.is_tokens:
        return (
            f"family {family!r} needs {FAMILIES[family].needs}; the data holds int64 token ids of shape "
            f"{shape} (vocab_size {data.vocab_size}): use family {' or '.join(map(repr, fitting))} "
            "or your own family"
        )
    hint = " (save 1-D samples as (N, 1, L) for a 1-D conv)" if len(shape) == 1 else ""
    return (
        f"family {family!r} needs {FAMILIES[family].needs}; the data has {data.input_dtype} samples of "
        f"shape {shape}: use one of {fitting}{hint}"
    )


def _nbits_problem(space: SearchSpace, family: str, data: Dataset, target: Target) -> str | None:
    """Why an ``mlp`` trial of ``int4-weight`` would fail on this data, else None.

    ``MatMulNBits`` quantizes a weight of at least ``MIN_NBITS_K`` rows (K). An MLP's first
    layer has K = the data's features, the others K = the units its hidden layers keep after
    pruning: a table of fewer features needs a hidden layer that keeps enough. A ``when`` that
    keeps int4 from narrow models is not followed: the space's narrowest model counts.
    """
    if family != "mlp" or "int4-weight" not in space_methods(space):
        return None
    features = math.prod(data.input_shape)
    if features >= MIN_NBITS_K:
        return None
    multiple = target.channel_multiple
    kept, width, ratio = min(
        (pruned_units(int(width), count, multiple), int(width), ratio)
        for width in _values_or_default(space, "arch.width")
        for ratio, count in _unit_counts(space, int(width))
    )
    if kept >= MIN_NBITS_K:
        return None
    return (
        f"it can draw int4-weight (4-bit weight-only MatMulNBits), which needs a MatMul/Gemm "
        f"weight of K >= {MIN_NBITS_K} rows; on these {features} features an mlp of "
        f"arch.width {width} pruned {ratio} keeps {kept} units (multiples of {multiple} on "
        f"target {target.name!r}), so such a trial has none and would fail: use the shipped "
        f"'tabular-mlp' space, raise arch.width or lower pruning_ratio until {MIN_NBITS_K} "
        "units remain, or drop int4-weight (bits 4)"
    )


def _unit_counts(space: SearchSpace, width: int) -> list[tuple[str, int]]:
    """Each pruning ratio the space gives, as text, with the units torch-pruning 1.6 leaves of
    ``width`` before rounding, ``int(width * (1 - ratio))``; a continuous range gives every
    count between its ends."""
    counts = [("0", width)]  # unpruned, as where the space sets no ratio
    for name, param in space.params.items():
        if (param.sets or name) != "pruning_ratio":
            continue
        if isinstance(param, FloatParam) and param.step is None:
            low, high = int(width * (1 - param.high)), int(width * (1 - param.low))
            counts += [(f"up to {param.high:g}", count) for count in range(low, high + 1)]
        else:
            counts += [(f"{r:g}", int(width * (1 - r))) for r in _grid(param)]
    return counts


def _grid(param: Param) -> list[float]:
    """Every value a pruning ratio takes: a stepped float range's steps, else its values."""
    if isinstance(param, FloatParam) and param.step is not None:
        steps = round((param.high - param.low) / param.step)
        return [min(param.low + param.step * i, param.high) for i in range(steps + 1)]
    return [float(v) for v in param_values(param)]


def pruned_units(width: int, count: int, multiple: int) -> int:
    """The units a layer of ``width`` keeps when pruning leaves ``count`` of them, rounded down
    to a multiple of ``multiple`` as torch-pruning 1.6 rounds them (``_round_to``); a count that
    rounds to none leaves the layer unpruned."""
    if count >= width:
        return width
    return count - count % multiple or width


def _values_or_default(space: SearchSpace, key: str) -> list:
    """The values the space gives candidate ``key``, or its default where the space sets none."""
    values = space.values_of(key)
    if values or not key.startswith("arch."):
        return values
    default = next((f.default for f in fields(ArchConfig) if f"arch.{f.name}" == key), MISSING)
    return [] if default is MISSING else [default]


def _user_arch(space: SearchSpace, family: str) -> ArchConfig:
    """The architecture of the space's first candidate with ``family``, following ``when``."""
    chosen: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for name, param in space.params.items():
        if param.when and not all(chosen.get(k) in v for k, v in param.when.items()):
            continue
        key = param.sets or name
        chosen[name] = family if key == "arch.family" else param_values(param)[0]
        values[key] = chosen[name]
    values["arch.output_layer"] = space.output_layer or OUTPUT_LAYER
    return candidate_from_values(values).arch


def _dry_run(arch: ArchConfig, space: SearchSpace, data: Dataset) -> None:
    """Build, prune (at the space's largest ratio) and export a user-written family once.

    Raises:
        SpecError: A stage failed; the message names the family and the stage.
    """
    ratio = max((float(v) for v in space.values_of("pruning_ratio")), default=0.0)
    key = repr((arch, ratio, data.fingerprint))
    if key in _PASSED:
        return
    from automl.candidate import TrainConfig
    from automl.models import build_model, import_family
    from automl.pipeline.export import export_onnx
    from automl.pipeline.prune import prune

    with _stage(arch.family, "import", data):
        import_family(arch.family)
    with _stage(arch.family, "build", data):
        model = build_model(arch, data.input_shape, data.num_classes, vocab_size=data.vocab_size)
    with _stage(arch.family, "prune", data):
        layer = arch.output_layer
        pruned = prune(model.eval(), data, ratio, TrainConfig(epochs=0), output_layer=layer).model
    with _stage(arch.family, "export", data), tempfile.TemporaryDirectory() as tmp:
        export_onnx(pruned, data.x_test[:4], Path(tmp) / "family.onnx")
    _PASSED.add(key)


@contextmanager
def _stage(family: str, stage: str, data: Dataset) -> Iterator[None]:
    """Turn any failure inside into a SpecError naming the family, the stage and the data."""
    try:
        yield
    except Exception as e:  # the user's code may raise anything
        cause = e.__cause__ if isinstance(e, SpecError) and e.__cause__ is not None else e
        detail = str(cause) if isinstance(cause, SpecError) else f"{type(cause).__name__}: {cause}"
        raise SpecError(
            f"family {family!r} failed at {stage} on {data.input_dtype} samples of shape "
            f"{data.input_shape}: {detail}"
        ) from e


__all__ = ["check_compatible", "families", "input_problem", "pruned_units"]
