"""Does structured pruning pay? Pruned channel counts on and off the kernels' block.

Run: ``.venv/bin/python -m bench.pruning [--rounds 5]``.
The models of :mod:`bench.models` (a 64-channel CNN and two depthwise-separable nets) are
pruned by torch-pruning at several ratios, once keeping whatever channel count the ratio gives
and once rounding it to a multiple of 8 (the ``cpu`` target's ``channel_multiple``). Every
graph's fp32 per-sample latency on the CPU target is measured once per round, rounds
interleaved; each row gives the speedup over the unpruned model (the median of the per-round
ratios, and their min-max) with the pruned channel counts.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
from pathlib import Path

import torch
import torch_pruning as tp

from automl.inputs.data import load_dataset
from automl.pipeline.export import export_onnx
from automl.pipeline.latency import measure_latency
from automl.targets import load_target
from bench.models import MODELS

RATIOS = (0.2, 0.4, 0.6)


def pruned_graphs(name: str, tmp: Path) -> dict[str, Path]:
    """The unpruned graph and those pruned at every ratio, with and without rounding."""
    data = load_dataset("digits")
    base = MODELS[name].factory().eval()
    example = torch.from_numpy(data.x_train[:1])
    graphs = {"unpruned": export_onnx(base, data.x_test[:64], tmp / f"{name}.onnx").path}
    for ratio in RATIOS:
        for round_to in (None, 8):
            model = copy.deepcopy(base)
            tp.pruner.MetaPruner(
                model, example, importance=tp.importance.GroupMagnitudeImportance(p=2),
                pruning_ratio=ratio, ignored_layers=[model.classifier], round_to=round_to,
            ).step()  # fmt: skip
            widths = sorted(
                {m.out_channels for m in model.modules() if isinstance(m, torch.nn.Conv2d)}
            )
            label = f"ratio {ratio}, round_to {round_to}: channels {widths}"
            path = tmp / f"{name}-{ratio}-{round_to}.onnx"
            graphs[label] = export_onnx(model.eval(), data.x_test[:64], path).path
    return graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    args = parser.parse_args()
    cpu, x = load_target("cpu"), load_dataset("digits").x_test
    with tempfile.TemporaryDirectory(prefix="bench-pruning-") as tmp:
        for name in MODELS:
            graphs = pruned_graphs(name, Path(tmp))
            for batch in args.batches:
                ratios: dict[str, list[float]] = {label: [] for label in graphs}
                for _ in range(args.rounds):
                    times = {
                        label: measure_latency(path, cpu, x, batch, method="fp32").per_sample_ms
                        for label, path in graphs.items()
                    }
                    for label in graphs:
                        ratios[label].append(times["unpruned"] / times[label])
                print(f"\n## {name}, batch {batch}, {args.rounds} rounds\n")
                print("| graph | speedup over unpruned (min-max) |\n|---|---|")
                for label, values in ratios.items():
                    print(
                        f"| {label} | {statistics.median(values):.2f}x "
                        f"({min(values):.2f}-{max(values):.2f}) |"
                    )


if __name__ == "__main__":
    main()
