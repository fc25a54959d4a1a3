"""Optimizing a trained model: the best speedup within a 1 % accuracy drop, and how soon.

Run: ``.venv/bin/python -m bench.optimize [--trials 20] [--seeds 0 1] [--epochs 6]``.
A CNN (three 64-channel convs) is trained on digits once and saved; then, for each seed, a
study of that model on the shipped ``trained-model`` space (objectives: accuracy drop and
speedup; constraint: accuracy drop <= 0.01) runs with the default sampler and with random
search, side by side in this process. Each row gives the best feasible ``speedup`` (the
baseline's per-sample latency at its serving batch of 1 over the trial's, measured beside it),
the trial that first reached it, and the best ``speedup_same_batch`` (both at the trial's
batch: what pruning and quantization alone gain). Trial 0 of every study is the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch
from torch import nn

from bench._common import run_study

SAMPLERS = ("default", "random")
WIDTH = 64


def digits_cnn() -> nn.Module:
    """The benchmark's model: three 3x3 convs of 64 channels on the 1x8x8 digits."""
    layers: list[nn.Module] = []
    channels = 1
    for _ in range(3):
        layers += [nn.Conv2d(channels, WIDTH, 3, padding=1), nn.BatchNorm2d(WIDTH), nn.ReLU()]
        channels = WIDTH
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    model.add_module("classifier", nn.Linear(WIDTH, 10))
    return model


def pretrain(path: Path, epochs: int) -> float:
    """Train the model on digits, save its state dict; returns its validation accuracy."""
    from automl.candidate import TrainConfig
    from automl.inputs.data import load_dataset
    from automl.pipeline.train import train

    result = train(digits_cnn(), load_dataset("digits"), TrainConfig(epochs=epochs))
    torch.save(result.model.state_dict(), path)
    return result.history[-1]["val_accuracy"]


def best_within_budget(study) -> tuple[float, int | None, float]:
    """Best feasible speedup, the trial that reached it, and the best at the same batch."""
    feasible = [
        t for t in study.trials
        if t.state.name == "COMPLETE" and t.user_attrs.get("feasible")
    ]  # fmt: skip
    if not feasible:
        return 0.0, None, 0.0
    best = max(feasible, key=lambda t: (t.user_attrs["speedup"], -t.number))
    own = max(t.user_attrs["speedup_same_batch"] for t in feasible)
    return best.user_attrs["speedup"], best.number, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-optimize-") as tmp:
        weights = Path(tmp) / "digits_cnn.pt"
        accuracy = pretrain(weights, args.epochs)
        print(f"baseline model: {WIDTH}-channel CNN, validation accuracy {accuracy:.4f}")
        model = {"factory": "bench.optimize:digits_cnn", "weights": str(weights)}
        rows = {sampler: [] for sampler in SAMPLERS}
        print("| seed | sampler | best speedup (drop <= 1 %) | reached at trial | "
              "best at the same batch |")  # fmt: skip
        print("|---|---|---|---|---|")
        for seed in args.seeds:
            for sampler in SAMPLERS:
                study, _ = run_study(
                    Path(tmp) / f"{sampler}-{seed}", model=model, sampler=sampler, seed=seed,
                    n_trials=args.trials, name=f"optimize-{sampler}-{seed}",
                    trials_per_model=1 if sampler == "random" else 6,
                )  # fmt: skip
                best, at, own = best_within_budget(study)
                rows[sampler].append((best, at))
                print(f"| {seed} | {sampler} | {best:.2f}x | {at} | {own:.2f}x |")
        means = {s: statistics.mean(b for b, _ in rows[s]) for s in SAMPLERS}
        reached = {s: statistics.mean(a or args.trials for _, a in rows[s]) for s in SAMPLERS}
        print(
            f"\nmean best speedup: default {means['default']:.2f}x, random "
            f"{means['random']:.2f}x (ratio {means['default'] / means['random']:.2f}); "
            f"mean trial reaching it: default {reached['default']:.1f}, "
            f"random {reached['random']:.1f} of {args.trials}"
        )


if __name__ == "__main__":
    main()
