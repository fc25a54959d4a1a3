"""Whether quantization paid: a quantized trial's fp32 graph, timed beside it, and where the
time went.

Every trial whose method is not ``fp32`` also measures its own fp32 graph (the same pruned
model, at the same batch, on the same backend's provider) beside its quantized one, in the
same process, so ``quantization_gain`` (the fp32 per-sample latency over the trial's) is a
ratio of two figures that a loaded host moves together: on the CPU the two graphs run in turn,
elsewhere the fp32 graph right after the trial's measurement. Both graphs are profiled, and the
per-operator times are recorded; where the gain is at most 1 the record says, from the profile,
where the quantized graph's time went (see :func:`automl.pipeline.profile.explain_no_gain`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automl.pipeline.latency import measure_latency, per_sample_in_turn
from automl.pipeline.profile import (
    SourceGraph,
    explain_no_gain,
    op_times,
    profile_graph,
    quantizes_nothing,
)
from automl.records import QUANTIZATION_GAIN
from automl.targets.gpus import measurement_lock
from automl.trials.stages import timed

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from automl.inputs.data import Dataset
    from automl.pipeline.latency import Latency
    from automl.pipeline.quantize import QuantizedModel
    from automl.targets import Target
    from automl.trials.stages import CachedStages


# The note of a per-layer method's trial that quantized no layer.
ALL_KEPT = (
    "no layer was quantized: keep_fp32 kept every layer of this model in fp32, so this is its "
    "fp32 graph (a smaller keep_fp32 quantizes some)"
)


def measure_gain(
    stages: CachedStages,
    quantized: QuantizedModel,
    latency: Latency,
    target: Target,
    data: Dataset,
    timings: dict[str, float],
) -> dict:
    """The gain of a quantized trial over its fp32 graph, its per-operator times, and, where
    the gain is at most 1, why (``note``).

    Returns:
        ``{"gain", "fp32_per_sample_ms", "quantized_per_sample_ms", "ops": {"fp32": {op: ms},
        "quantized": {op: ms}}, "note"}``; the op times are per run at the trial's batch.
    """
    candidate = stages.candidate
    batch, level = candidate.batch_size, candidate.graph_optimization
    exported, _ = stages.exported(timings)
    timings.setdefault(QUANTIZATION_GAIN, 0.0)
    with timed(timings, QUANTIZATION_GAIN):
        fp32_ms, own_ms = _fp32_beside(
            exported.path, quantized, latency, target, data, batch, level
        )
        runtime = target.backend_for(quantized.method)
        profiles = {
            name: profile_graph(path, target, method, data.x_test, batch, optimization=level)
            for name, path, method in (
                ("fp32", exported.path, "fp32"),
                ("quantized", quantized.path, quantized.method),
            )
            if runtime.profiles
        }
    gain = fp32_ms / own_ms
    note = None
    if stages.method.per_layer and quantizes_nothing(SourceGraph(quantized.path)):
        note = ALL_KEPT
    elif gain <= 1 and not profiles:
        note = f"on {runtime.name}, this graph ran no faster than its fp32 graph ({gain:.2f}x)"
    elif gain <= 1:
        graph = SourceGraph(exported.path)
        note = explain_no_gain(graph, profiles["quantized"], profiles["fp32"], gain)
    return {
        "gain": gain,
        "fp32_per_sample_ms": fp32_ms,
        "quantized_per_sample_ms": own_ms,  # beside it (see _fp32_beside)
        "ops": {name: op_times(nodes) for name, nodes in profiles.items()},
        "note": note,
    }


def _fp32_beside(
    fp32_path: Path,
    quantized: QuantizedModel,
    latency: Latency,
    target: Target,
    data: Dataset,
    batch: int,
    level: str,
) -> Sequence[float]:
    """Per-sample ms of the fp32 graph and of the quantized one: on the CPU run in turn (see
    :func:`automl.pipeline.latency.per_sample_in_turn`), elsewhere the fp32 graph timed after
    the trial's own measurement."""
    graphs = [(fp32_path, batch, "fp32", level), (quantized.path, batch, quantized.method, level)]
    in_turn = per_sample_in_turn(target, data.x_test, graphs)
    if in_turn is not None:
        return in_turn
    with measurement_lock(target):
        fp32 = measure_latency(
            fp32_path, target, data.x_test, batch, method="fp32", optimization=level
        )
    return fp32.per_sample_ms, latency.per_sample_ms
