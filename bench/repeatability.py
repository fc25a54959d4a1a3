"""Repeatability of a trained model's speedups: the same study, run twice, trial by trial.

Run: ``.venv/bin/python -m bench.repeatability [--seeds 1 2] [--trials 20] [--model cnn]``.
The model of :mod:`bench.models` is pretrained once (torch seed 0). For each seed, a
random-search study of it on the shipped ``trained-model`` space runs twice, back to back in
this process: the same params, the same weights and the same accuracies, so every difference
between the two runs' ``speedup`` of a trial is the measurement's. Per seed, and over all, it
prints how far the runs disagree: the median and the largest factor between a trial's two
speedups.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from pathlib import Path

import numpy as np

from bench._common import run_study
from bench.models import MODELS
from bench.optimize import pretrain


def disagreement(first: list[float], second: list[float]) -> tuple[float, float]:
    """The median and the largest factor between paired positive figures of two runs."""
    factors = [math.exp(abs(math.log(a / b))) for a, b in zip(first, second, strict=True)]
    return float(np.median(factors)), max(factors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    args = parser.parse_args()
    bench_model = MODELS[args.model]
    with tempfile.TemporaryDirectory(prefix="bench-repeat-") as folder:
        tmp = Path(folder)
        source, weights = bench_model.source(tmp), tmp / "model.pt"
        accuracy = pretrain(bench_model, source, weights, bench_model.epochs)
        model = {
            "factory": f"bench.models:{bench_model.factory.__name__}",
            "weights": str(weights),
            "expected_accuracy": accuracy,
        }
        pooled: list[list[float]] = [[], []]
        for seed in args.seeds:
            runs = []
            for run in range(2):
                study, _ = run_study(
                    tmp / f"{seed}-{run}", model=model, dataset=source, sampler="random",
                    seed=seed, n_trials=args.trials, name=f"repeat-{seed}-{run}",
                    trials_per_model=1,
                )  # fmt: skip
                runs.append([t.user_attrs["speedup"] for t in study.trials[1:]])  # 0: baseline
            median, largest = disagreement(*runs)
            print(f"seed {seed}: a trial's two speedups differ by {median:.2f}x (median), "
                  f"{largest:.2f}x at most, over {len(runs[0])} trials", flush=True)  # fmt: skip
            pooled[0] += runs[0]
            pooled[1] += runs[1]
        median, largest = disagreement(*pooled)
        print(f"all seeds: {median:.2f}x (median), {largest:.2f}x at most, {len(pooled[0])} trials")


if __name__ == "__main__":
    main()
