"""Joint against two-stage: search the model and its serving settings together, or one after the other.

Run: ``.venv/bin/python -m bench.serving_joint [--seeds 3] [--trials 12]``.

Per seed, side by side on the models and settings of the shipped ``digits-serving`` space:

- **joint**: one serving study (Poisson load, max rate within a p99 of 10 ms) over the model
  knobs and the batching knobs together;
- **two-stage**: a study of the same model knobs against isolated latency per sample (the
  batching knobs fixed at one request, no queue delay, one instance), then, for the model it
  would pick, every batching setting of the space measured under the same load.

Each stage picks the fastest model within 1 % accuracy of its own best; the ratio printed is the
joint pick's max rate over the two-stage pick's, with their accuracies, and its min–max over
seeds. The two-stage arm spends more load measurements than the joint one (a whole sweep); the
joint arm spends them on its own trials.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import optuna
import yaml
from optuna.artifacts import download_artifact

from automl.candidate import Batching
from automl.fleet.study_loop import run_study_loop
from automl.inputs.data import load_dataset
from automl.pipeline.serving import measure_serving
from automl.search.space import SEARCH_SPACES_DIR
from automl.search.spec import parse_spec
from automl.service.studies import create_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage
from automl.targets import load_target

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
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = yaml.safe_load((SEARCH_SPACES_DIR / "digits-serving.yaml").read_text())
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(seeds):
            joint = _joint(Path(tmp) / f"joint-{seed}", seed, trials)
            staged = _two_stage(Path(tmp) / f"staged-{seed}", space, seed, trials)
            ratios.append(joint[1] / staged[1])
            print(
                f"seed {seed}: joint {joint[1]:,.0f}/s at accuracy {joint[0]:.3f}, two-stage "
                f"{staged[1]:,.0f}/s at accuracy {staged[0]:.3f}: ratio {ratios[-1]:.2f}"
            )
    return ratios


def print_summary(ratios: list[float]) -> None:
    """The ratio's mean and min–max over seeds."""
    print(
        f"joint / two-stage max rate within 1 % of each one's best accuracy: mean "
        f"{statistics.mean(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f}, "
        f"{len(ratios)} seeds)"
    )


def _run(workdir: Path, spec: dict):
    settings = Settings(storage=f"sqlite:///{workdir}/s.db", artifacts_dir=workdir / "art")
    workdir.mkdir(parents=True)
    storage = open_storage(settings.storage, settings)
    study = create_study(parse_spec(spec), storage)
    run_study_loop(
        study.study_name, storage, artifact_store=open_artifact_store(settings), settings=settings
    )
    return study, settings


def _pick(trials, metric: str, best_is_high: bool):
    """The trial best on ``metric`` among those within 1 % accuracy of the best."""
    done = [t for t in trials if t.state.name == "COMPLETE"]
    top = max(t.user_attrs["accuracy"] for t in done)
    close = [t for t in done if t.user_attrs["accuracy"] >= top - 0.01]
    return (max if best_is_high else min)(close, key=lambda t: t.user_attrs[metric])


def _joint(workdir: Path, seed: int, trials: int) -> tuple[float, float]:
    spec = {"name": "joint", "search_space": "digits-serving", "n_trials": trials, "seed": seed}
    study, _ = _run(workdir, {**spec, "serving": SCENARIO})
    best = _pick(study.trials, "max_rate_rps", best_is_high=True)
    return best.user_attrs["accuracy"], best.user_attrs["max_rate_rps"]


def _two_stage(workdir: Path, space: dict, seed: int, trials: int) -> tuple[float, float]:
    model_only = {k: v for k, v in space.items() if k != "serving"}
    model_only["params"] = {k: v for k, v in space["params"].items() if k not in KNOBS}
    model_only["params"]["batch_size"] = {"type": "fixed", "value": 1}
    path = workdir.parent / f"{workdir.name}-space.yaml"
    path.write_text(yaml.safe_dump({**model_only, "name": "model-only"}))
    spec = {"name": "staged", "search_space": str(path), "n_trials": trials, "seed": seed}
    study, settings = _run(workdir, {**spec, "constraints": []})
    best = _pick(study.trials, "latency_per_sample_ms", best_is_high=False)
    model = Path(tempfile.mkdtemp(dir=workdir)) / "model.onnx"
    download_artifact(
        artifact_store=open_artifact_store(settings),
        file_path=str(model),
        artifact_id=best.user_attrs["artifact_id"],
    )
    data, target = load_dataset("digits", seed=seed), load_target("cpu")
    scenario = parse_spec({"serving": SCENARIO}).serving
    method = best.user_attrs["candidate"]["method"]
    choices = [space["params"][k]["choices"] for k in KNOBS]
    rates = []
    for max_batch, delay, instances in itertools.product(*choices):
        served = measure_serving(
            model, target, data.x_test, Batching(max_batch, delay, instances), scenario,
            method=method, start_rps=2000.0, seed=seed,
        )  # fmt: skip
        rates.append(served["metrics"]["max_rate_rps"])
    return best.user_attrs["accuracy"], max(rates)


if __name__ == "__main__":
    main()
