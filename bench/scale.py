"""Scale-out on PostgreSQL: (a) 1 vs 2 real workers, (b) a simulated fleet of 8-32 workers.

Run: ``.venv/bin/python -m bench.scale [--trials 12] [--fleet 8 16 32]`` with PostgreSQL on
127.0.0.1:5432 (database ``test``); each part uses a throwaway schema.

(a) runs ``automl worker`` processes (one torch thread each, stage cache off) on a study of
small MLPs, first one worker then two, and prints trials/min and the ratio.
(b) starts N processes that each run trials of a sleep-only objective through Optuna's RDB
storage with heartbeats, the way workers do, and prints the storage overhead per trial
(trial wall time minus the sleep: ask, tell, heartbeats, stale-trial checks) and errors.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
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
SLEEP_S = 0.2


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
    """Trials/min over the whole run, and in steady state (between first and last completion)."""
    env = {**os.environ, "AUTOML_STORAGE": url, "AUTOML_CACHE_ENABLED": "false",
           "AUTOML_ARTIFACTS_DIR": str(workdir / "artifacts")}  # fmt: skip
    name = f"scale-{workers}"
    space = workdir / "space.yaml"
    space.write_text(SPACE)
    automl = [sys.executable, "-m", "automl"]
    subprocess.run([*automl, "study", "start", "--detach", "--name", name, "--space", str(space),
                    "--n-trials", str(trials)], env=env, check=True, capture_output=True)  # fmt: skip
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
    done = sorted(
        t.datetime_complete
        for t in optuna.load_study(study_name=name, storage=url).trials
        if t.state.name == "COMPLETE"
    )
    return wall, 60 * (len(done) - 1) / (done[-1] - done[0]).total_seconds()


def _fleet_member(url: str, name: str, trials: int, queue: multiprocessing.Queue) -> None:
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    overheads, cpu, errors = [], [], 0
    try:
        storage = optuna.storages.RDBStorage(
            url, engine_kwargs={"pool_pre_ping": True, "pool_size": 1, "max_overflow": 1},
            heartbeat_interval=1, grace_period=10,
        )  # fmt: skip
        # Random sampling: the point is the storage's cost, not a sampler's.
        study = optuna.load_study(
            study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler()
        )
    except Exception:  # counted and reported; the bench goes on
        queue.put(([], [], trials))
        return
    for _ in range(trials):
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            study.optimize(lambda t: time.sleep(SLEEP_S) or t.suggest_float("x", 0, 1), n_trials=1)
        except Exception:  # counted as an error
            errors += 1
            continue
        overheads.append(time.perf_counter() - start - SLEEP_S)
        cpu.append(time.process_time() - start_cpu)
    queue.put((overheads, cpu, errors))


def _fleet(url: str, workers: int, trials_each: int) -> tuple[float, float, float, int]:
    name = f"fleet-{workers}"
    optuna.create_study(study_name=name, storage=url)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [
        context.Process(target=_fleet_member, args=(url, name, trials_each, queue))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    for process in processes:
        process.join()
    overheads = [o for member, _, _ in results for o in member]
    cpu = [c for _, member, _ in results for c in member]
    errors = sum(e for _, _, e in results)
    p99 = statistics.quantiles(overheads, n=100)[98]
    return statistics.median(overheads) * 1000, p99 * 1000, statistics.median(cpu) * 1000, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--fleet", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--trials-each", type=int, default=10)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with Schema() as url, tempfile.TemporaryDirectory() as tmp:
        one = _real_workers(url, 1, args.trials, Path(tmp))
        two = _real_workers(url, 2, args.trials, Path(tmp))
    for label, index in (("whole run, with process start-up", 0), ("steady state", 1)):
        print(f"(a) {args.trials} trials, {label}: 1 worker {one[index]:.1f} trials/min, "
              f"2 workers {two[index]:.1f} trials/min, ratio {two[index] / one[index]:.2f}")  # fmt: skip
    for workers in args.fleet:
        with Schema() as url:
            median_ms, p99_ms, cpu_ms, errors = _fleet(url, workers, args.trials_each)
        print(f"(b) {workers:>2} workers x {args.trials_each} sleep trials: storage overhead per "
              f"trial median {median_ms:.1f} ms, p99 {p99_ms:.1f} ms (client CPU per trial "
              f"{cpu_ms:.1f} ms), errors {errors}")  # fmt: skip


if __name__ == "__main__":
    main()
