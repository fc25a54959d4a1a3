"""Dynamic batching under Poisson load: the product's search against a brute-force sweep, side by side.

Run: ``.venv/bin/python -m bench.serving [--seeds 5] [--duration 0.4] [--slo-ms 5]``.

For one exported digits ResNet on the CPU target, served by
:func:`automl.pipeline.serving.measure_serving` (one ONNX Runtime session per instance, the
target's one thread each; the max-rate search as a serving study runs it):

1. The sweep (Triton Model Analyzer's brute mode): every ``max_batch`` × ``max_queue_delay_ms``
   × ``instances`` setting, each with its max rate within the p99 SLO. Its cost is counted in
   load runs, the floor's included.
2. The harness floor: the p99 of a model that does nothing, at the sweep's best setting and
   rate, as a share of the SLO.
3. The search, once per seed, with a quarter of the sweep's load runs: Optuna's TPE over the
   same settings, each proposal screened as a serving study screens its trials
   (:mod:`automl.trials.screen`): skipped where its isolated latency bounds its max rate below
   the best measured so far, and ended after one run where it breaks the SLO at that rate. Its
   first proposal is the capacity-first one a max-rate study queues; the same search without it
   runs beside it, for comparison.
4. Side by side: the sweep's best setting and each seed's pick measured again, in three
   interleaved rounds of a finer max-rate search (10 runs, not 6), and the ratio of each pick's
   median max rate to the sweep's best, with its min–max over seeds.
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
from automl.pipeline.export import export_onnx
from automl.pipeline.serving import MAX_RATE_PROBES, Batching, harness_floor
from automl.search.params import suggest_value
from automl.search.space import SearchSpace
from automl.search.spec import Serving
from automl.trials.screen import RateToBeat
from bench._common import Server
from bench.serving_joint import joint_ratios, print_summary

MAX_BATCH = (1, 4, 16)
DELAY_MS = (0.0, 0.5, 2.0)
INSTANCES = (1, 2)
SETTINGS = [Batching(*s) for s in itertools.product(MAX_BATCH, DELAY_MS, INSTANCES)]
# The same settings as a search space's serving knobs, in Batching's order.
SPACE = SearchSpace.model_validate({"name": "bench-serving", "params": {
    "serving.max_batch": {"type": "categorical", "choices": list(MAX_BATCH)},
    "serving.max_queue_delay_ms": {"type": "categorical", "choices": list(DELAY_MS)},
    "serving.instances": {"type": "categorical", "choices": list(INSTANCES)},
}})  # fmt: skip
# Proposals a search may make beyond its budget's worth (repeats and screened ones cost no run).
MAX_PROPOSALS = 4 * len(SETTINGS)
ROUNDS = 3  # side-by-side measurements of each setting compared
# Runs of each side-by-side max-rate search: its bisections resolve the rate to a few percent, finer
# than the 5 % goal (a study's 6 resolve it to about 10 %).
JUDGE_PROBES = 10
# The product's search, and the same search without its capacity-first trial.
ARMS = ("search (TPE, screens, capacity first)", "search without the capacity-first trial")


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
        scenario = Serving(slo_p99_ms=args.slo_ms, duration_s=args.duration)
        server = Server(path, rows, scenario, MAX_BATCH, method="fp32")
        sweep, sweep_runs = {}, 0
        for setting in SETTINGS:
            sweep[setting], runs = server.serve(setting)
            sweep_runs += runs
        best = max(sweep, key=sweep.__getitem__)
        print(f"sweep: {len(SETTINGS)} settings, {sweep_runs} load runs of {args.duration:g} s")
        for setting, rate in sorted(sweep.items(), key=lambda kv: -kv[1])[:5]:
            print(f"  {_label(setting)}: max rate {rate:,.0f}/s within p99 {args.slo_ms:g} ms")
        floor = harness_floor(rows, best, max(sweep[best], 1.0), duration_s=args.duration)
        share = floor.latency_ms["p99"] / args.slo_ms
        print(f"harness floor at {_label(best)}: p99 {floor.latency_ms['p99']:.3f} ms, "
              f"{share:.1%} of the SLO")  # fmt: skip

        budget = max(1, sweep_runs // 4)
        arms = {arm: [_search(server, budget, seed, arm == ARMS[0]) for seed in range(args.seeds)]
                for arm in ARMS}  # fmt: skip
        picks = [pick for searched in arms.values() for pick, _ in searched]
        again = _side_by_side(server, best, picks)
        print(f"side by side: sweep's best {_label(best)} at {again[best]:,.0f}/s")
        for arm, searched in arms.items():
            _summary(arm, searched, again, best, budget / sweep_runs)
    if args.joint_seeds:
        print_summary(joint_ratios(args.joint_seeds, args.joint_trials))


def _summary(
    arm: str, searched: list[tuple[Batching, int]], again: dict, best: Batching, share: float
) -> None:
    """Each seed's pick and runs, and the mean and min–max of its pick over the sweep's best."""
    print(f"{arm} (at most {share:.2f} of the sweep's load runs):")
    for seed, (pick, runs) in enumerate(searched):
        print(f"  seed {seed}: {_label(pick)} ({again[pick]:,.0f}/s again), {runs} runs")
    ratios = [again[pick] / again[best] for pick, _ in searched if again[best] > 0]
    if ratios:
        print(f"  pick / sweep's best max rate: mean {statistics.mean(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} seeds)")  # fmt: skip


def _search(server: Server, budget: int, seed: int, capacity_first: bool) -> tuple[Batching, int]:
    """The setting TPE picks within ``budget`` load runs, and the runs it spent (a proposal
    starts only where a full search fits in what is left). A proposal is
    screened as a serving study screens a trial (:mod:`automl.trials.screen`) and then PRUNED;
    a repeated one is told its rate again. With ``capacity_first``, the first proposal is the
    one a max-rate study queues (:meth:`SearchSpace.capacity_first`)."""
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=3)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    if capacity_first:
        study.enqueue_trial(SPACE.capacity_first())
    measured: dict[Batching, float] = {}
    numbers: dict[Batching, int] = {}  # the trial that measured each setting
    spent = 0
    for _ in range(MAX_PROPOSALS):
        if spent + MAX_RATE_PROBES + 1 > budget:  # a full search and its floor would overrun it
            break
        trial = study.ask()
        setting = Batching(*(suggest_value(trial, k, p) for k, p in SPACE.params.items()))
        if setting in measured:
            study.tell(trial, measured[setting])
            continue
        to_beat = None
        if measured:
            leader = max(measured, key=measured.__getitem__)
            to_beat = RateToBeat(measured[leader], numbers[leader])
        rate, runs = server.serve(setting, to_beat)
        spent += runs
        if to_beat and not rate:  # screened: by its bound, or by its first run
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        measured[setting], numbers[setting] = rate, trial.number
        study.tell(trial, rate)
    screened = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    print(
        f"  seed {seed}: measured "
        + ", ".join(f"{_label(k)} {v:,.0f}/s" for k, v in measured.items())
        + f"; {screened} screened"
    )
    return max(measured, key=measured.__getitem__), spent


def _side_by_side(server: Server, best: Batching, picks: list[Batching]) -> dict[Batching, float]:
    """The median max rate of the sweep's best and of each distinct pick, measured again in
    ``ROUNDS`` interleaved rounds: near-equal settings differ by less than one run's noise."""
    settings = list(dict.fromkeys([best, *picks]))
    measured: dict[Batching, list[float]] = {setting: [] for setting in settings}
    for _ in range(ROUNDS):
        for setting in settings:
            measured[setting].append(server.serve(setting, probes=JUDGE_PROBES)[0])
    return {setting: statistics.median(rates) for setting, rates in measured.items()}


def _label(setting: Batching) -> str:
    return (
        f"max_batch {setting.max_batch}, delay {setting.max_queue_delay_ms:g} ms, "
        f"{setting.instances} instance(s)"
    )


if __name__ == "__main__":
    main()
