"""Trials per minute with the stage cache on and off, on the same suggested params.

Run: ``.venv/bin/python -m bench.throughput [--trials 30] [--seeds 0 1 2]``. With several
seeds, the last line is the speed-up over all of them (one seed's mix of models varies).
The cache-on study runs first with the default sampler and ``--trials-per-model`` (default: the
spec's); the cache-off study replays exactly its params (enqueued, no variants of its own), so
both evaluate the same candidates side by side in one run. A one-trial study runs first, untimed,
so that neither side pays the process's first imports and first ONNX export (~5 s): a worker
pays them once, whatever the cache does. Shares of time are of whole trials (start to end in
the storage), so sampler and storage time count as outside training.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from automl.search.spec import StudySpec
from bench._common import run_study

TRAINING = ("train", "prune")  # prune's time is almost all fine-tuning


def _summary(study, seconds: float) -> dict:
    trials = [t for t in study.trials if t.state.name == "COMPLETE"]
    timings = [t.user_attrs["timings"] for t in trials]
    total = sum(t.duration.total_seconds() for t in trials)
    training = sum(t[s] for t in timings for s in TRAINING)
    reused = [t.user_attrs.get("reused", {}) for t in trials]
    return {
        "trials": len(trials),
        "per_min": 60 * len(trials) / seconds,
        "seconds_total": seconds,
        "seconds_trials": total,
        "seconds_training": training,
        "outside_training": 1 - training / total,
        "stages": {stage: sum(t[stage] for t in timings) / len(trials) for stage in timings[0]}
        | {"other": (total - sum(sum(t.values()) for t in timings)) / len(trials)},
        "front": len(study.best_trials),
        "accuracy": [t.user_attrs["accuracy"] for t in trials],
        "reused_train": sum(r.get("train", False) for r in reused),
        "reused_prune": sum(r.get("prune", False) for r in reused),
        "seconds": [t.duration.total_seconds() for t in trials],
        "trained": [not r.get("train", False) for r in reused],
    }


def _ceiling(on: dict, off: dict) -> str:
    """What a trial costs with and without reused training, and the speed-up this mix allows.

    The ceiling is the cache-off time over the cache-on time of the trials that trained, as if
    every trial that reused training cost nothing.
    """
    trained = [s for s, t in zip(on["seconds"], on["trained"], strict=True) if t]
    reused = [s for s, t in zip(on["seconds"], on["trained"], strict=True) if not t]
    line = f"  trials that trained: {len(trained)} of {len(on['seconds'])}"
    if trained and reused:
        line += (
            f"; mean trial {sum(trained) / len(trained):.2f} s when it trained, "
            f"{sum(reused) / len(reused):.2f} s when it reused training"
        )
    if trained:
        line += f"; ceiling at this mix {sum(off['seconds']) / sum(trained):.2f}x"
    return line


def _compare(workdir: Path, spec: dict, trials_per_model: int) -> tuple[dict, dict, bool]:
    """Run the cache-on study, then the cache-off one on its params; summaries and same params."""
    start = time.perf_counter()
    cached, _ = run_study(workdir / "on", cache=True, **spec, trials_per_model=trials_per_model)
    on = _summary(cached, time.perf_counter() - start)
    params = [t.params for t in cached.trials if t.state.name == "COMPLETE"]
    start = time.perf_counter()
    uncached, _ = run_study(
        workdir / "off", cache=False, enqueue=params, **spec, trials_per_model=1
    )
    off = _summary(uncached, time.perf_counter() - start)
    return on, off, params == [t.params for t in uncached.trials if t.state.name == "COMPLETE"]


def _report(on: dict, off: dict) -> None:
    for label, row in (("cache on ", on), ("cache off", off)):
        print(
            f"  {label}: {row['per_min']:6.1f} trials/min, "
            f"{100 * row['outside_training']:4.1f} % of trial time outside train/fine-tune, "
            f"reused train {row['reused_train']}, prune {row['reused_prune']}"
        )
    for label, row in (("cache on ", on), ("cache off", off)):
        stages = ", ".join(f"{k} {1000 * v:.0f}" for k, v in row["stages"].items())
        print(f"  {label} mean ms per trial: {stages}")
    print(f"  speed-up with cache: {on['per_min'] / off['per_min']:.2f}x")
    print(_ceiling(on, off))
    gap = max(abs(a - b) for a, b in zip(on["accuracy"], off["accuracy"], strict=True))
    print(f"  front sizes {on['front']} vs {off['front']}; "
          f"largest accuracy gap between the same trials {gap:.4f}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--space", default="digits-mixed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--trials-per-model", type=int, default=StudySpec().trials_per_model)
    args = parser.parse_args()
    spec = {"name": "throughput", "search_space": args.space, "n_trials": args.trials}
    totals = {side: {"elapsed": 0.0, "trials": 0.0, "training": 0.0} for side in ("on", "off")}
    with tempfile.TemporaryDirectory() as tmp:
        run_study(Path(tmp) / "warm-up", cache=False, **(spec | {"n_trials": 1, "seed": 0}))
        for seed in args.seeds:
            on, off, same = _compare(Path(tmp) / str(seed), spec | {"seed": seed},
                                     args.trials_per_model)  # fmt: skip
            print(f"{args.trials} trials of {args.space}, seed {seed}, trials_per_model "
                  f"{args.trials_per_model}, same params: {same}")  # fmt: skip
            _report(on, off)
            for side, row in (("on", on), ("off", off)):
                totals[side]["elapsed"] += row["seconds_total"]
                totals[side]["trials"] += row["seconds_trials"]
                totals[side]["training"] += row["seconds_training"]
    if len(args.seeds) > 1:
        on, off = totals["on"], totals["off"]
        print(f"all seeds: speed-up with cache {off['elapsed'] / on['elapsed']:.2f}x "
              f"({on['elapsed']:.0f} s against {off['elapsed']:.0f} s); trial time outside "
              f"train/fine-tune {100 * (1 - on['training'] / on['trials']):.1f} % with the "
              f"cache, {100 * (1 - off['training'] / off['trials']):.1f} % without")  # fmt: skip


if __name__ == "__main__":
    main()
