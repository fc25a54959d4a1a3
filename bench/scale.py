"""Scale-out on PostgreSQL: (a) 1 vs 2 real workers, (b) a simulated fleet of 8-32 workers.

Run: ``.venv/bin/python -m bench.scale [--trials 60] [--fleet 8 16 32] [--sleep 0.2 2]`` with
PostgreSQL on 127.0.0.1:5432 (database ``test``); each part uses a throwaway schema.

(a) runs ``automl worker`` processes (one torch thread each, stage cache off) on a study of
small MLPs, first one worker then two, and prints trials/min and the ratio. Both runs take the
same enqueued candidates, so they do the same work whatever each worker's sampler would draw.
Each worker process takes a few seconds to start (imports, dataset), which a short run cannot
amortise: at 20 trials that start-up alone cut the whole-run ratio from 1.79 (steady) to 1.53.
(b) starts N processes that each run trials of a sleep-only objective through Optuna's RDB
storage with heartbeats, the way workers do, and prints the storage overhead per trial
(trial wall time minus the sleep: ask, tell, heartbeats, stale-trial checks) and errors, for
each sleep length. Members start their first trial at a random point within one trial
length, as a fleet in steady state does (``--no-stagger``: all at once, the thundering herd of
a fleet started in the same second), and stay up until all are done, as a fleet's workers
do, so that no process exit is counted. It also prints the machine's CPU time per trial (clients
and PostgreSQL, from /proc/stat): when workers / (sleep + overhead) trials per second need
more CPU than the cores have, the overhead measured is queueing for this machine's CPU, not
the storage.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path

import optuna
import psycopg

from automl.settings import Settings
from automl.storage.factory import cached, open_storage

PG = "host=127.0.0.1 port=5432 dbname=test user=postgres"
SPACE = """name: scale
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: int, low: 32, high: 96, step: 32}
  arch.depth: {type: int, low: 1, high: 2}
  pruning_ratio: {type: float, low: 0.0, high: 0.4, step: 0.2}
  bits: {type: categorical, choices: [32, 8]}
  batch_size: {type: fixed, value: 8}
  train.epochs: {type: fixed, value: 30}
"""


class Schema:
    """A throwaway PostgreSQL schema and its SQLAlchemy URL."""

    def __enter__(self) -> str:
        self.name = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.name}"')
        return (
            f"postgresql+psycopg://postgres@127.0.0.1:5432/test?options=-csearch_path%3D{self.name}"
        )

    def __exit__(self, *_: object) -> None:
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{self.name}" CASCADE')


def _real_workers(url: str, workers: int, trials: int, workdir: Path) -> tuple[float, float]:
    """Trials/min over the whole run, and in steady state.

    Steady state sums each worker's rate from the start of its first trial to the end of its
    last, which leaves out process start-up and the final wait for the other worker.
    """
    env = {**os.environ, "AUTOML_STORAGE": url, "AUTOML_CACHE_ENABLED": "false",
           "AUTOML_ARTIFACTS_DIR": str(workdir / "artifacts")}  # fmt: skip
    name = f"scale-{workers}"
    space = workdir / "space.yaml"
    space.write_text(SPACE)
    automl = [sys.executable, "-m", "automl"]
    subprocess.run([*automl, "study", "start", "--detach", "--name", name, "--space", str(space),
                    "--n-trials", str(trials)], env=env, check=True, capture_output=True)  # fmt: skip
    study = optuna.load_study(study_name=name, storage=url)
    for params in _candidates(trials):
        study.enqueue_trial(params)
    start = time.perf_counter()
    processes = [
        subprocess.Popen(
            [*automl, "worker", "--target", "cpu", "--studies", name],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    for process in processes:
        process.wait()
    wall = 60 * trials / (time.perf_counter() - start)
    by_worker: dict[str, list] = {}
    for trial in optuna.load_study(study_name=name, storage=url).trials:
        if trial.state.name == "COMPLETE":
            by_worker.setdefault(trial.user_attrs["worker"], []).append(trial)
    steady = sum(
        60 * len(done) / (max(t.datetime_complete for t in done)
                          - min(t.datetime_start for t in done)).total_seconds()
        for done in by_worker.values()
    )  # fmt: skip
    return wall, steady


def _candidates(count: int) -> list[dict]:
    """The same ``count`` points of SPACE for every run, in a fixed shuffled order."""
    grid = [
        {"arch.width": w, "arch.depth": d, "pruning_ratio": r, "bits": b}
        for w, d, r, b in itertools.product((32, 64, 96), (1, 2), (0.0, 0.2, 0.4), (32, 8))
    ]
    random.Random(0).shuffle(grid)
    return [grid[i % len(grid)] for i in range(count)]


def _busy_jiffies() -> int:
    """CPU time all processes on this machine have used, in clock ticks (Linux)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def _fleet_member(url, name, trials, sleep_s, heartbeat_s, stagger, queue, ready) -> None:
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    overheads, cpu, errors = [], [], 0
    try:
        # The storage exactly as `automl worker` opens it: pre-ping, pool, heartbeats, retry, cache.
        grace_s = max(120, 4 * heartbeat_s)  # the default grace, or what longer beats need
        settings = Settings(storage=url, heartbeat_interval_s=heartbeat_s, grace_period_s=grace_s)
        storage = cached(open_storage(url, settings))
        # Random sampling: the point is the storage's cost, not a sampler's.
        study = optuna.load_study(
            study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler()
        )
    except Exception:  # counted and reported; the bench goes on
        ready.wait()
        queue.put(([], [], trials))
        ready.wait()
        return
    ready.wait()  # every member is set up
    if stagger:  # desynchronised, as trials of different lengths leave a running fleet
        time.sleep(random.Random(os.getpid()).uniform(0, sleep_s))
    for _ in range(trials):
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            study.optimize(lambda t: time.sleep(sleep_s) or t.suggest_float("x", 0, 1), n_trials=1)
        except Exception:  # counted as an error
            errors += 1
            continue
        overheads.append(time.perf_counter() - start - sleep_s)
        cpu.append(time.process_time() - start_cpu)
    queue.put((overheads, cpu, errors))
    ready.wait()  # a fleet's workers live on: exiting (~0.3 s of CPU) is not part of a trial


def _fleet(url: str, workers: int, sleep_s: float, args: argparse.Namespace) -> dict:
    name = f"fleet-{workers}"
    optuna.create_study(study_name=name, storage=url)
    context = multiprocessing.get_context("spawn")
    queue, ready = context.Queue(), context.Barrier(workers + 1)
    member = (url, name, args.trials_each, sleep_s, args.heartbeat, args.stagger, queue, ready)
    processes = [context.Process(target=_fleet_member, args=member) for _ in range(workers)]
    for process in processes:
        process.start()
    ready.wait()  # start-up (imports, connections) is not part of the measurement
    busy, start = _busy_jiffies(), time.perf_counter()
    results = [queue.get() for _ in processes]
    busy, seconds = _busy_jiffies() - busy, time.perf_counter() - start
    ready.wait()  # now the members may exit
    for process in processes:
        process.join()
    overheads = [o for member, _, _ in results for o in member]
    cpu = [c for _, member, _ in results for c in member]
    measured_trials = len(overheads) + sum(e for _, _, e in results)
    return {
        "median_ms": statistics.median(overheads) * 1000,
        "p99_ms": statistics.quantiles(overheads, n=100)[98] * 1000,
        "client_cpu_ms": statistics.median(cpu) * 1000,
        "machine_cpu_ms": 1000 * busy / os.sysconf("SC_CLK_TCK") / max(measured_trials, 1),
        "trials_per_s": measured_trials / seconds,
        "errors": sum(e for _, _, e in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--fleet", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--trials-each", type=int, default=10)
    parser.add_argument("--sleep", type=float, nargs="+", default=[0.2, 2.0])
    parser.add_argument("--heartbeat", type=int, default=1, help="heartbeat interval, s")
    parser.add_argument(
        "--stagger", action=argparse.BooleanOptionalAction, default=True,
        help="start members within one trial length of each other (default) or all at once",
    )  # fmt: skip
    parser.add_argument("--parts", nargs="+", choices=["a", "b"], default=["a", "b"])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if "a" in args.parts:
        _part_a(args.trials)
    if "b" in args.parts:
        _part_b(args)


def _part_a(trials: int) -> None:
    with Schema() as url, tempfile.TemporaryDirectory() as tmp:
        one = _real_workers(url, 1, trials, Path(tmp))
        two = _real_workers(url, 2, trials, Path(tmp))
    for label, index in (("whole run, with process start-up", 0), ("steady state", 1)):
        print(f"(a) {trials} trials, {label}: 1 worker {one[index]:.1f} trials/min, "
              f"2 workers {two[index]:.1f} trials/min, ratio {two[index] / one[index]:.2f}")  # fmt: skip


def _part_b(args: argparse.Namespace) -> None:
    cores = os.cpu_count()
    start = "staggered start" if args.stagger else "all starting at once"
    for sleep_s in args.sleep:
        for workers in args.fleet:
            with Schema() as url:
                r = _fleet(url, workers, sleep_s, args)
            print(
                f"(b) {workers:>2} workers x {args.trials_each} trials of {sleep_s:g} s sleep, {start}: "
                f"storage overhead per trial median {r['median_ms']:.1f} ms, p99 "
                f"{r['p99_ms']:.1f} ms, errors {r['errors']}; {r['trials_per_s']:.1f} trials/s, "
                f"CPU per trial {r['client_cpu_ms']:.1f} ms in the client, "
                f"{r['machine_cpu_ms']:.1f} ms machine-wide (so {cores} cores sustain at most "
                f"{1000 * cores / r['machine_cpu_ms']:.0f} trials/s)"
            )


if __name__ == "__main__":
    main()
