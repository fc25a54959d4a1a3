"""Search efficiency: hypervolume per trial budget for the default sampler, NSGA-II and random.

Run: ``.venv/bin/python -m bench.search [--trials 40] [--seeds 0 1 2] [--png bench/out/hv.png]``.
Every sampler runs the same budget on ``digits-mixed`` (stage cache on) for each seed. The
default sampler and NSGA-II run with ``--trials-per-model`` (the spec's default, 6, unless
given); random is plain random search, one trial per model. The hypervolume uses feasible
trials, objectives (accuracy, log10 µs per sample) and the fixed reference point
(accuracy 0.5, 10^3 µs per sample). "By the mean curve" is the first trial count at which the
hypervolume averaged over seeds reaches random's averaged final one. The ratio to random is
that of the final hypervolumes' means, with a paired 95 % bootstrap interval over seeds and the
range of the per-seed ratios. The search optimises validation accuracy; the same curves on the
test split's accuracy, which no sampler sees, are printed too.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from optuna._hypervolume import compute_hypervolume

from bench._common import ratio_interval, run_study

SAMPLERS = ("default", "nsga2", "random")
REFERENCE = np.array([-0.5, 3.0])  # (-accuracy, log10 µs/sample)


def hypervolume_curve(study, accuracy_key: str = "accuracy") -> list[float]:
    """Hypervolume of the feasible trials among the first k, for every k."""
    points, curve = [], []
    for trial in sorted(study.trials, key=lambda t: t.number):
        if trial.state.name == "COMPLETE" and trial.user_attrs.get("feasible", True):
            accuracy = trial.user_attrs[accuracy_key]
            per_sample_ms = trial.user_attrs["latency_per_sample_ms"]
            point = np.array([-accuracy, math.log10(per_sample_ms * 1000)])
            if (point < REFERENCE).all():
                points.append(point)
        curve.append(compute_hypervolume(np.array(points), REFERENCE) if points else 0.0)
    return curve


def trials_to_reach(curve: list[float], level: float) -> int | None:
    """First trial count whose hypervolume reaches ``level``."""
    return next((k + 1 for k, value in enumerate(curve) if value >= level), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--space", default="digits-mixed")
    parser.add_argument(
        "--samplers", nargs="+", default=list(SAMPLERS), help="random is always run"
    )
    parser.add_argument("--trials-per-model", type=int, default=None)
    parser.add_argument("--png", type=Path, default=Path("bench/out/hypervolume.png"))
    args = parser.parse_args()
    samplers = list(dict.fromkeys([*args.samplers, "random"]))
    curves: dict[str, list[list[float]]] = {s: [] for s in samplers}
    test_curves: dict[str, list[list[float]]] = {s: [] for s in samplers}
    seconds: dict[str, list[float]] = {s: [] for s in samplers}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for sampler in samplers:
                per_model = 1 if sampler == "random" else args.trials_per_model
                variants = {} if per_model is None else {"trials_per_model": per_model}
                start = time.perf_counter()
                study, _ = run_study(
                    Path(tmp) / f"{sampler}-{seed}", name=f"{sampler}-{seed}",
                    search_space=args.space, n_trials=args.trials, sampler=sampler, seed=seed,
                    **variants,
                )  # fmt: skip
                seconds[sampler].append(time.perf_counter() - start)
                curves[sampler].append(hypervolume_curve(study))
                test_curves[sampler].append(hypervolume_curve(study, "test_accuracy"))
    print(f"{args.trials} trials of {args.space}, seeds {args.seeds}, reference {REFERENCE}")
    for split, split_curves in (("validation", curves), ("test", test_curves)):
        print(f" accuracy on the {split} split:")
        _report(split_curves, seconds, samplers)
    _plot(curves, args.png)
    print(f"  plot: {args.png}")


def ratio_to_random(curves: dict[str, list[list[float]]], sampler: str) -> str:
    """``sampler``'s final hypervolume over random's: the ratio of means over seeds, its paired
    95 % bootstrap interval, and the range of the per-seed ratios."""
    mine, random = ([curve[-1] for curve in curves[s]] for s in (sampler, "random"))
    ratio, low, high = ratio_interval(mine, random)
    per_seed = [a / max(b, 1e-12) for a, b in zip(mine, random, strict=True)]
    return (
        f"ratio to random {ratio:.3f}, 95 % interval {low:.3f}-{high:.3f}, "
        f"per seed {min(per_seed):.3f}-{max(per_seed):.3f}"
    )


def _report(
    curves: dict[str, list[list[float]]], seconds: dict[str, list[float]], samplers: list[str]
) -> None:
    mean_curves = {s: np.mean(curves[s], axis=0).tolist() for s in samplers}
    final = {s: curve[-1] for s, curve in mean_curves.items()}  # so random reaches its own
    for sampler in samplers:
        reach = [
            trials_to_reach(mine, random[-1])
            for mine, random in zip(curves[sampler], curves["random"], strict=True)
        ]
        shown = ", ".join("never" if r is None else str(r) for r in reach)
        if None not in reach:
            shown += f" (mean {statistics.mean(reach):.1f})"
        on_average = trials_to_reach(mean_curves[sampler], final["random"])
        print(
            f"  {sampler:<8} hypervolume {final[sampler]:.4f} "
            f"({ratio_to_random(curves, sampler)}); "
            f"trials to reach random's final hypervolume per seed: {shown}, "
            f"by the mean curve: {on_average or 'never'}; "
            f"mean {statistics.mean(seconds[sampler]):.0f} s per study"
        )


def _plot(curves: dict[str, list[list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(7, 4))
    for sampler, runs in curves.items():
        mean = np.mean(np.array(runs), axis=0)
        axes.plot(range(1, len(mean) + 1), mean, label=sampler)
    axes.set_xlabel("trials")
    axes.set_ylabel("hypervolume (mean over seeds)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
