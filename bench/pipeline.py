"""Time each pipeline stage for a default candidate of each family, and its share of the trial.

Run: ``.venv/bin/python -m bench.pipeline [--repeats 3] [--target cpu] [--only text]``.
Shares are taken side by side in one run, so they hold on a noisy machine. The digits rows run
on the built-in digits; the rows of the shipped spaces (signals-cnn, images-resnet,
text-transformer) on the synthetic data of :mod:`automl.inputs.synthetic`, each with a candidate of
its space trained for the space's epochs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from automl.candidate import ArchConfig, Candidate, TrainConfig
from automl.inputs.data import load_dataset
from automl.targets import load_target
from automl.trials.trial import run_trial

# label: (dataset, candidate)
ROWS = {
    "digits cnn w32 d2 prune0.3 int8-static b32": (
        "digits",
        Candidate(ArchConfig("cnn", 32, 2), pruning_ratio=0.3, method="int8-static", batch_size=32),
    ),
    "digits mlp w64 d2 prune0.3 fp32 b1": (
        "digits",
        Candidate(ArchConfig("mlp", 64, 2), pruning_ratio=0.3),
    ),
    "signals-cnn (1, 64) w16 d2 stages2 x2 k5 prune0.3 int8-static b8": (
        "automl.inputs.synthetic:signals",
        Candidate(
            ArchConfig("cnn", 16, 2, kernel_size=5, stages=2, width_growth=2.0),
            pruning_ratio=0.3, method="int8-static", batch_size=8, train=TrainConfig(epochs=8),
        ),
    ),
    "images-resnet (3, 32, 32) w16 d1 stages3 x2 prune0.3 int8-static b8": (
        "automl.inputs.synthetic:images",
        Candidate(
            ArchConfig("resnet", 16, 1, stages=3, width_growth=2.0),
            pruning_ratio=0.3, method="int8-static", batch_size=8, train=TrainConfig(epochs=6),
        ),
    ),
    "text-transformer (16,) w64 d2 h4 mlp2 prune0.25 int8-dynamic b8": (
        "automl.inputs.synthetic:tokens",
        Candidate(
            ArchConfig("transformer", 64, 2, heads=4, mlp_ratio=2.0),
            pruning_ratio=0.25, method="int8-dynamic", batch_size=8,
            train=TrainConfig(epochs=8, lr=3e-3),
        ),
    ),
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--only", default="", help="Run the rows whose label contains this.")
    args = parser.parse_args()
    target = load_target(args.target)
    for label, (source, candidate) in ROWS.items():
        if args.only in label:
            _bench(label, candidate, load_dataset(source, seed=0), target, args.repeats)


def _bench(label, candidate, data, target, repeats) -> None:
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as workdir:
            runs.append(run_trial(candidate, target, data, workdir))
    stages = list(runs[0].timings)
    medians = {s: statistics.median(r.timings[s] for r in runs) for s in stages}
    total = sum(medians.values())
    print(f"\n{label} on {target.name}: median trial {total:.3f} s over {repeats} runs")
    for stage in stages:
        print(f"  {stage:<9} {medians[stage]:8.4f} s  {100 * medians[stage] / total:5.1f} %")
    metrics = runs[-1].metrics
    latency = runs[-1].latency
    print(
        f"  accuracy {metrics['accuracy']:.3f}  p50 {metrics['latency_p50_ms']:.4f} ms"
        f"  p99 {metrics['latency_p99_ms']:.4f} ms  runs {latency['runs']}"
        f"  cv {latency['cv']:.3f}  source {latency['source']} ({latency['provider']})"
    )


if __name__ == "__main__":
    main()
