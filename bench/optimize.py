"""Optimizing a trained model: does the default sampler beat random search, and by how much?

Run: ``.venv/bin/python -m bench.optimize [--trials 20] [--seeds 0 1 ... 9] [--epochs N]
[--pretrain-seeds 0 1 2] [--trials-per-model 6]``. The models of :mod:`bench.models` are
trained on their data, from each pretrain seed (default 0 alone), and saved: a CNN (three
64-channel convs) and a depthwise-separable net (the catalog's ``mobilenet`` family) on digits,
and a MobileNetV2-like net on dim digits, where full int8 loses over 1 %. For each model and
seed, a study of that model on the shipped ``trained-model`` space (objectives: accuracy drop and
speedup; constraint: accuracy drop <= 0.01; int8-mixed among its methods) runs with the default
sampler and with random search (each trial a new model: ``trials_per_model`` 1), side by side
in this process, from the same seed.

Each row gives the best feasible ``speedup`` (the baseline's per-sample latency at its serving
batch of 1 over the trial's, measured beside it), the trial that first reached 90 % of it, and
the best quantization gain among feasible quantized trials. Per model, the summary gives the
ratio of mean best speedups (default over random) with a 95 % bootstrap interval over seeds
(paired: both samplers of a seed are resampled together), and the mean trial at which each
reached 90 % of its best. With several pretrain seeds, a pooled summary follows, its interval
resampling seeds within each pretrained model, with the range of the per-model ratios. Trial 0 of
every study is the baseline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from bench._common import ratio_interval, run_study
from bench.models import MODELS, BenchModel

SAMPLERS = ("default", "random")


def pretrain(model: BenchModel, source: str, path: Path, epochs: int, seed: int = 0) -> float:
    """Train a model on ``source`` as a trained model's study feeds it (not standardised), from
    torch seed ``seed``, and save its state dict; returns its validation accuracy."""
    from automl.candidate import TrainConfig
    from automl.inputs.data import load_dataset
    from automl.pipeline.train import train

    data = load_dataset(source, standardize="none")
    torch.manual_seed(seed)  # the same model in every run: torch seeds each process at random
    result = train(model.factory(), data, TrainConfig(epochs=epochs))
    torch.save(result.model.state_dict(), path)
    return result.history[-1]["val_accuracy"]


def summarize(study) -> tuple[float, int | None, float | None]:
    """Best feasible speedup, the first trial at 90 % of it, and the best quantization gain."""
    feasible = [
        t for t in study.trials
        if t.state.name == "COMPLETE" and t.user_attrs.get("feasible")
    ]  # fmt: skip
    if not feasible:
        return 0.0, None, None
    best = max(t.user_attrs["speedup"] for t in feasible)
    at = min(t.number for t in feasible if t.user_attrs["speedup"] >= 0.9 * best)
    gains = [
        t.user_attrs["quantization_gain"] for t in feasible if "quantization_gain" in t.user_attrs
    ]
    return best, at, max(gains, default=None)


Rows = dict[str, list[tuple[float, int | None]]]


def run_model(name: str, tmp: Path, args: argparse.Namespace) -> None:
    """The studies of one model, pretrained from each of ``args.pretrain_seeds``, and summaries."""
    pooled: Rows = {sampler: [] for sampler in SAMPLERS}
    groups, ratios = [], []
    for pretrain_seed in args.pretrain_seeds:
        rows = _studies(name, tmp, args, pretrain_seed)
        ratios.append(report(f"{name}, pretrained from seed {pretrain_seed}", rows, args.trials))
        for sampler in SAMPLERS:
            pooled[sampler] += rows[sampler]
        groups += [pretrain_seed] * len(rows["default"])
    if len(args.pretrain_seeds) > 1:
        report(f"{name}, all {len(ratios)} pretrained models", pooled, args.trials, groups)
        print(f"{name}: ratio per pretrained model {min(ratios):.2f} to {max(ratios):.2f}")


def _studies(name: str, tmp: Path, args: argparse.Namespace, pretrain_seed: int) -> Rows:
    """Both samplers' studies on each seed, for the model pretrained from ``pretrain_seed``."""
    weights, source = tmp / f"{name}-{pretrain_seed}.pt", MODELS[name].source(tmp)
    epochs = args.epochs or MODELS[name].epochs
    accuracy = pretrain(MODELS[name], source, weights, epochs, pretrain_seed)
    print(
        f"\n## {name}, pretrained from seed {pretrain_seed}: validation accuracy {accuracy:.4f}\n"
    )
    model = {  # the study refuses a model that does not reach this accuracy on its data
        "factory": f"bench.models:{MODELS[name].factory.__name__}",
        "weights": str(weights),
        "expected_accuracy": accuracy,
    }
    rows: Rows = {sampler: [] for sampler in SAMPLERS}
    print(
        "| seed | sampler | best speedup (drop <= 1 %) | trial at 90 % of it | best gain over fp32 |"
    )
    print("|---|---|---|---|---|")
    for seed in args.seeds:
        for sampler in SAMPLERS:
            study, _ = run_study(
                tmp / f"{name}-{pretrain_seed}-{sampler}-{seed}", model=model, dataset=source,
                sampler=sampler, seed=seed, n_trials=args.trials,
                name=f"optimize-{name}-{pretrain_seed}-{sampler}-{seed}",
                trials_per_model=1 if sampler == "random" else args.trials_per_model,
            )  # fmt: skip
            best, at, gain = summarize(study)
            rows[sampler].append((best, at))
            shown = "-" if gain is None else f"{gain:.2f}x"
            print(f"| {seed} | {sampler} | {best:.2f}x | {at} | {shown} |", flush=True)
    return rows


def report(label: str, rows: Rows, trials: int, groups: list[int] | None = None) -> float:
    """Print the ratio of mean best speedups with its interval, and when each sampler got there;
    returns the ratio."""
    ratio, low, high = ratio_interval(
        [b for b, _ in rows["default"]], [b for b, _ in rows["random"]], groups
    )
    means = {s: statistics.mean(b for b, _ in rows[s]) for s in SAMPLERS}
    reached = {s: statistics.mean(a or trials for _, a in rows[s]) for s in SAMPLERS}
    print(
        f"\n{label}: mean best speedup default {means['default']:.2f}x, random "
        f"{means['random']:.2f}x; ratio {ratio:.2f} (95 % bootstrap interval {low:.2f}-{high:.2f},"
        f" {len(rows['default'])} studies each); mean trial at 90 % of the best: default "
        f"{reached['default']:.1f}, random {reached['random']:.1f} of {trials}",
        flush=True,
    )
    return ratio


def per_model(parser: argparse.ArgumentParser, run, prefix: str) -> None:
    """Parse ``parser`` (with ``--epochs`` and ``--models`` added), then ``run(name, folder,
    args)`` for each model, in one temporary folder."""
    parser.add_argument("--epochs", type=int, help="training epochs (default: each model's)")
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for name in args.models:
            run(name, Path(tmp), args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument(
        "--trials-per-model", type=int, default=6,
        help="the default sampler's trials_per_model (random search has 1)",
    )  # fmt: skip
    parser.add_argument(
        "--pretrain-seeds", type=int, nargs="+", default=[0],
        help="torch seeds to pretrain each model from: one model per seed, each studied",
    )  # fmt: skip
    per_model(parser, run_model, "bench-optimize-")


if __name__ == "__main__":
    main()
