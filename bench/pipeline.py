"""Time each pipeline stage for a default digits candidate and print its share of the trial.

Run: ``.venv/bin/python -m bench.pipeline [--repeats 3] [--target cpu]``.
Shares are taken side by side in one run, so they hold on a noisy machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

from automl.candidate import ArchConfig, Candidate
from automl.data import load_dataset
from automl.targets import load_target
from automl.trials.trial import run_trial

CANDIDATES = {
    "cnn w32 d2 prune0.3 int8-static b32": Candidate(
        ArchConfig("cnn", 32, 2), pruning_ratio=0.3, bits=8, batch_size=32
    ),
    "mlp w64 d2 prune0.3 fp32 b1": Candidate(ArchConfig("mlp", 64, 2), pruning_ratio=0.3),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()
    target = load_target(args.target)
    data = load_dataset("digits", seed=0)
    for label, candidate in CANDIDATES.items():
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as workdir:
                runs.append(run_trial(candidate, target, data, workdir))
        stages = list(runs[0].timings)
        medians = {s: statistics.median(r.timings[s] for r in runs) for s in stages}
        total = sum(medians.values())
        print(f"\n{label} on {target.name}: median trial {total:.3f} s over {args.repeats} runs")
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
