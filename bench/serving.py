"""Dynamic batching under Poisson load: a TPE search against a brute-force sweep, side by side.

Run: ``.venv/bin/python -m bench.serving [--seeds 5] [--duration 0.4] [--slo-ms 5]``.

For one exported digits ResNet on the CPU (one ONNX Runtime session per instance, one thread
each), served by :mod:`automl.pipeline.serving`:

1. The harness floor: the p99 of a model that does nothing, at the sweep's best setting and
   rate, as a share of the SLO.
2. The sweep (Triton Model Analyzer's brute mode): every ``max_batch`` × ``max_queue_delay_ms``
   × ``instances`` setting, each with its max rate within the p99 SLO (MLPerf's server scenario:
   doubling, then bisection).
3. The search: Optuna's TPE over the same settings, with a quarter of the sweep's measurements,
   once per seed.
4. Side by side: the sweep's best setting and each seed's pick measured again, interleaved, and
   the ratio of each pick's max rate to the sweep's best, with its min–max over seeds.
5. Joint against two-stage (:mod:`bench.serving_joint`): the max rate at equal accuracy of
   searching the model and its batching together, over choosing the model by isolated latency
   and then sweeping its batching; ``--joint-seeds 0`` leaves it out.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import tempfile
from pathlib import Path

import numpy as np
import optuna

from automl.candidate import ArchConfig
from automl.inputs.data import load_dataset
from automl.models import build_model
from automl.pipeline._ort import make_session
from automl.pipeline.export import export_onnx
from automl.pipeline.serving import Batching, harness_floor, max_rate, measure_load
from bench.serving_joint import joint_ratios, print_summary

MAX_BATCH = (1, 4, 16)
DELAY_MS = (0.0, 0.5, 2.0)
INSTANCES = (1, 2)
SETTINGS = [Batching(*s) for s in itertools.product(MAX_BATCH, DELAY_MS, INSTANCES)]
PROBES = 8
START_RPS = 2000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=0.4, help="seconds per load run")
    parser.add_argument("--slo-ms", type=float, default=5.0, help="the p99 bound")
    parser.add_argument("--joint-seeds", type=int, default=3)
    parser.add_argument("--joint-trials", type=int, default=8)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("automl").setLevel(logging.WARNING)
    data = load_dataset("digits", seed=0)
    rows = data.x_test.astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(ArchConfig("resnet", 16, 2), data.input_shape, data.num_classes)
        path = export_onnx(model.eval(), rows[:32], Path(tmp) / "resnet.onnx").path

        def rate_of(setting: Batching) -> float:
            sessions = [
                make_session(path, ["CPUExecutionProvider"], 1) for _ in range(setting.instances)
            ]
            name = sessions[0].get_inputs()[0].name
            runs = [lambda b, s=s: s.run(None, {name: b}) for s in sessions]

            def measure(rate: float):
                return measure_load(runs, rows, setting, rate, duration_s=args.duration)

            return max_rate(measure, args.slo_ms, START_RPS, probes=PROBES)[0]

        sweep = {setting: rate_of(setting) for setting in SETTINGS}
        best = max(sweep, key=sweep.__getitem__)
        print(f"sweep: {len(SETTINGS)} settings × {PROBES} runs of {args.duration:g} s")
        for setting, rate in sorted(sweep.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {_label(setting)}: max rate {rate:,.0f}/s within p99 {args.slo_ms:g} ms")
        floor = harness_floor(rows, best, max(sweep[best], START_RPS), duration_s=args.duration)
        share = floor.latency_ms["p99"] / args.slo_ms
        print(f"harness floor at {_label(best)}: p99 {floor.latency_ms['p99']:.3f} ms, "
              f"{share:.1%} of the SLO")  # fmt: skip

        budget = max(1, len(SETTINGS) // 4)
        picks = [_search(rate_of, budget, seed) for seed in range(args.seeds)]
        print(f"search: TPE, {budget} settings × {PROBES} runs per seed, {args.seeds} seeds")
        again = _side_by_side(rate_of, best, picks)
        ratios = [again[pick] / again[best] for pick in picks if again[best] > 0]
        print(f"side by side: sweep's best {_label(best)} at {again[best]:,.0f}/s")
        if ratios:
            print(
                f"search's pick / sweep's best max rate: mean {statistics.mean(ratios):.3f} "
                f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} seeds) "
                f"at {budget / len(SETTINGS):.2f} of the sweep's measurements"
            )
    if args.joint_seeds:
        print_summary(joint_ratios(args.joint_seeds, args.joint_trials))


def _search(rate_of, budget: int, seed: int) -> Batching:
    """The setting TPE picks in ``budget`` measurements."""
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(1, budget // 2))
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        return rate_of(
            Batching(
                trial.suggest_categorical("max_batch", MAX_BATCH),
                trial.suggest_categorical("max_queue_delay_ms", DELAY_MS),
                trial.suggest_categorical("instances", INSTANCES),
            )
        )

    study.optimize(objective, n_trials=budget)
    return Batching(**study.best_params)


def _side_by_side(rate_of, best: Batching, picks: list[Batching]) -> dict[Batching, float]:
    """Each distinct setting's max rate, measured again in turn (best, pick, best, pick, ...)."""
    measured: dict[Batching, list[float]] = {}
    for pick in picks:
        for setting in (best, pick):
            measured.setdefault(setting, []).append(rate_of(setting))
    return {setting: statistics.median(rates) for setting, rates in measured.items()}


def _label(setting: Batching) -> str:
    return (
        f"max_batch {setting.max_batch}, delay {setting.max_queue_delay_ms:g} ms, "
        f"{setting.instances} instance(s)"
    )


if __name__ == "__main__":
    main()
