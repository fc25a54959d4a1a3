"""Joint against two-stage: search the model and its serving settings together, or one after the other.

Run: ``.venv/bin/python -m bench.serving_joint [--seeds 3] [--trials 12]``.

Per seed, side by side on the models and settings of the shipped ``digits-serving`` space:

- **joint**: one serving study (Poisson load, max rate within a p99 of 10 ms) over the model
  knobs and the batching knobs together;
- **two-stage**: a study of the same model knobs against isolated latency per sample (the
  batching knobs fixed at one request, no queue delay, one instance), then, for the model it
  would pick, every batching setting of the space measured under the same load.

Both arms pick at one accuracy floor, 1 % below the lower of their two best accuracies: the
joint arm its trial with the highest max rate above it, the two-stage arm its fastest model per
sample above it. The ratio printed is the joint pick's max rate over the two-stage pick's (its
best setting), with their accuracies, and its min–max over seeds. The two-stage arm spends more
load measurements than the joint one (a whole sweep); the joint arm spends them on its own
trials.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import yaml
from optuna.artifacts import download_artifact

from automl.candidate import Batching
from automl.inputs.data import load_dataset
from automl.search.space import SEARCH_SPACES_DIR
from automl.search.spec import parse_spec
from automl.settings import Settings
from automl.storage.factory import open_artifact_store
from bench._common import Server, run_study

SCENARIO = {"rate_rps": "max", "slo_p99_ms": 10.0, "duration_s": 0.3}
KNOBS = ("serving.max_batch", "serving.max_queue_delay_ms", "serving.instances")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=12)
    args = parser.parse_args()
    print_summary(joint_ratios(args.seeds, args.trials))


def joint_ratios(seeds: int, trials: int) -> list[float]:
    """Per seed, the joint pick's max rate over the two-stage pick's; each seed printed."""
    space = yaml.safe_load((SEARCH_SPACES_DIR / "digits-serving.yaml").read_text())
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            joint, _ = run_study(Path(tmp) / f"joint-{seed}", **_joint_spec(seed, trials))
            staged_spec = _staged_spec(space, Path(tmp) / f"space-{seed}.yaml", seed, trials)
            staged, settings = run_study(Path(tmp) / f"staged-{seed}", **staged_spec)
            floor = min(_best_accuracy(joint.trials), _best_accuracy(staged.trials)) - 0.01
            pick = _pick(joint.trials, floor, "max_rate_rps", best_is_high=True)
            model = _pick(staged.trials, floor, "latency_per_sample_ms", best_is_high=False)
            rate = _sweep(model, space, settings, seed)
            ratios.append(pick.user_attrs["max_rate_rps"] / rate)
            print(
                f"seed {seed}: accuracy floor {floor:.3f}: joint "
                f"{pick.user_attrs['max_rate_rps']:,.0f}/s at accuracy "
                f"{pick.user_attrs['accuracy']:.3f}, two-stage {rate:,.0f}/s at accuracy "
                f"{model.user_attrs['accuracy']:.3f}: ratio {ratios[-1]:.2f}"
            )
    return ratios


def print_summary(ratios: list[float]) -> None:
    """The ratio's mean and min–max over seeds."""
    print(
        f"joint / two-stage max rate at one accuracy floor: mean "
        f"{statistics.mean(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}, "
        f"{len(ratios)} seeds)"
    )


def _best_accuracy(trials) -> float:
    return max(t.user_attrs["accuracy"] for t in trials if t.state.name == "COMPLETE")


def _pick(trials, floor: float, metric: str, best_is_high: bool):
    """The trial best on ``metric`` among the complete ones at ``floor`` accuracy or above."""
    done = [t for t in trials if t.state.name == "COMPLETE"]
    close = [t for t in done if t.user_attrs["accuracy"] >= floor]
    return (max if best_is_high else min)(close, key=lambda t: t.user_attrs[metric])


def _joint_spec(seed: int, trials: int) -> dict:
    return {
        "name": "joint", "search_space": "digits-serving", "n_trials": trials, "seed": seed,
        "serving": SCENARIO,
    }  # fmt: skip


def _staged_spec(space: dict, path: Path, seed: int, trials: int) -> dict:
    """The first stage: the space's model knobs against isolated latency per sample (the space
    written to ``path``)."""
    model_only = {k: v for k, v in space.items() if k != "serving"}
    model_only["params"] = {k: v for k, v in space["params"].items() if k not in KNOBS}
    model_only["params"]["batch_size"] = {"type": "fixed", "value": 1}
    path.write_text(yaml.safe_dump({**model_only, "name": "model-only"}))
    return {
        "name": "staged", "search_space": str(path), "n_trials": trials, "seed": seed,
        "constraints": [],
    }  # fmt: skip


def _sweep(trial, space: dict, settings: Settings, seed: int) -> float:
    """The second stage: the best max rate of ``trial``'s model over every batching setting
    of the space."""
    model = Path(tempfile.mkdtemp()) / "model.onnx"
    download_artifact(
        artifact_store=open_artifact_store(settings),
        file_path=str(model),
        artifact_id=trial.user_attrs["artifact_id"],
    )
    choices = [space["params"][k]["choices"] for k in KNOBS]
    server = Server(
        model, load_dataset("digits", seed=seed).x_test, parse_spec({"serving": SCENARIO}).serving,
        tuple(choices[0]), method=trial.user_attrs["candidate"]["method"], seed=seed,
    )  # fmt: skip
    return max(server.serve(Batching(*setting))[0] for setting in itertools.product(*choices))


if __name__ == "__main__":
    main()
