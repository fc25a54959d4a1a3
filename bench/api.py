"""API latency: ``GET /pareto`` and ``GET /trials`` on a study of 10,000 completed trials.

Run: ``.venv/bin/python -m bench.api [--trials 10000] [--storage URL]``.
The trials are synthetic but carry the attrs real ones do; they go straight into storage.
The server is ``api.serve.serve`` (uvicorn, no workers) in its own process; the clients
are ``httpx.AsyncClient`` coroutines in this one. Goal: p99 < 100 ms for /pareto at 50 clients.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_storage
from bench._common import start_server

try:
    from uvloop import run as _RUN  # a cheaper client loop where installed
except ImportError:
    _RUN = asyncio.run

TOKEN = "bench-token-0123456789"
STUDY = "bench-10k"
DISTRIBUTIONS = {
    "arch.width": IntDistribution(16, 128, step=16),
    "arch.depth": IntDistribution(1, 3),
    "pruning_ratio": FloatDistribution(0.0, 0.6, step=0.1),
    "bits": CategoricalDistribution([32, 16, 8, 4]),
    "batch_size": CategoricalDistribution([1, 8, 32, 128]),
}


def _trial(rng: random.Random) -> optuna.trial.FrozenTrial:
    params = {name: _draw(rng, d) for name, d in DISTRIBUTIONS.items()}
    accuracy = rng.uniform(0.85, 0.99)
    per_sample = rng.lognormvariate(-5, 1)
    p50 = per_sample * params["batch_size"]
    p99 = p50 * rng.uniform(1.05, 1.5)
    metrics = {
        "accuracy": accuracy,
        "latency_p50_ms": p50,
        "latency_p90_ms": p50 * 1.02,
        "latency_p99_ms": p99,
        "latency_per_sample_ms": per_sample,
        "throughput_sps": 1000 / per_sample,
        "size_mb": params["arch.width"] * params["bits"] / 8000,
        "params": 100.0 * params["arch.width"],
        "macs": 120.0 * params["arch.width"],
    }
    attrs = {
        **metrics,
        "feasible": p99 <= 5,
        "timings": {"train": 1.3, "prune": 0.09, "export": 0.04, "quantize": 0.03},
        "latency": {"p50_ms": p50, "p99_ms": p99, "runs": 200, "cv": 0.05, "converged": True},
        "latency_source": "measured",
        "env": {"target": "cpu", "onnxruntime": "1.32.0", "provider": "CPUExecutionProvider"},
        "candidate": {"arch": {"family": "mlp", "width": params["arch.width"]}, "bits": 8},
        "history": {"train": [{"epoch": e, "loss": 1 / e, "val_accuracy": 0.9} for e in (1, 2)]},
        "preprocessing": {"standardize": {"mean": 4.88, "std": 6.01}},
    }
    return optuna.trial.create_trial(
        values=[accuracy, per_sample],
        params=params,
        distributions=DISTRIBUTIONS,
        user_attrs=attrs,
        constraints={"latency_p99_ms <= 5": p99 - 5},
    )


def _draw(rng: random.Random, distribution) -> object:
    if isinstance(distribution, CategoricalDistribution):
        return rng.choice(distribution.choices)
    steps = round((distribution.high - distribution.low) / distribution.step)
    value = distribution.low + distribution.step * rng.randint(0, steps)
    return round(value, 6) if isinstance(distribution, FloatDistribution) else int(value)


def populate(url: str, n: int) -> float:
    """Create the study and its ``n`` trials; returns the seconds it took.

    ``study.add_trials`` costs about 36 ms a trial here (one ORM round trip per attr), some
    6 minutes for 10,000. So trial 0 goes in through ``add_trial`` and the rest are written
    as the same rows in one transaction with Optuna's own table models; the check below
    proves that a bulk trial reads back exactly like its template.
    """
    start = time.perf_counter()
    storage = open_storage(url, Settings(_env_file=None))
    study = create_study(parse_spec({"name": STUDY, "search_space": "digits-mlp"}), storage)
    rng = random.Random(0)
    trials = [_trial(rng) for _ in range(n)]
    study.add_trial(trials[0])
    _bulk_insert(storage, study._study_id, trials[1:], first_number=1)
    _check_round_trip(study, trials)
    return time.perf_counter() - start


def _bulk_insert(storage, study_id: int, trials: list, first_number: int) -> None:
    from optuna.distributions import distribution_to_json
    from optuna.storages._rdb import models
    from sqlalchemy import insert, select

    with storage.engine.begin() as conn:
        conn.execute(
            insert(models.TrialModel),
            [
                {
                    "number": first_number + i,
                    "study_id": study_id,
                    "state": t.state,
                    "datetime_start": t.datetime_start,
                    "datetime_complete": t.datetime_complete,
                }
                for i, t in enumerate(trials)
            ],
        )
        rows = conn.execute(
            select(models.TrialModel.trial_id, models.TrialModel.number).where(
                models.TrialModel.study_id == study_id,
                models.TrialModel.number >= first_number,
            )
        )
        ids = {number: trial_id for trial_id, number in rows}
        values, params, user_attrs, system_attrs = [], [], [], []
        for i, t in enumerate(trials):
            trial_id = ids[first_number + i]
            for objective, value in enumerate(t.values):
                stored, kind = models.TrialValueModel.value_to_stored_repr(value)
                values.append(
                    {
                        "trial_id": trial_id,
                        "objective": objective,
                        "value": stored,
                        "value_type": kind,
                    }
                )
            for name, value in t.params.items():
                dist = t.distributions[name]
                params.append(
                    {
                        "trial_id": trial_id,
                        "param_name": name,
                        "param_value": dist.to_internal_repr(value),
                        "distribution_json": distribution_to_json(dist),
                    }
                )
            for key, value in t.user_attrs.items():
                user_attrs.append(
                    {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                )
            for key, value in t.system_attrs.items():
                system_attrs.append(
                    {"trial_id": trial_id, "key": key, "value_json": json.dumps(value)}
                )
        conn.execute(insert(models.TrialValueModel), values)
        conn.execute(insert(models.TrialParamModel), params)
        conn.execute(insert(models.TrialUserAttributeModel), user_attrs)
        conn.execute(insert(models.TrialSystemAttributeModel), system_attrs)


def _check_round_trip(study: optuna.Study, trials: list) -> None:
    stored = study.get_trials(deepcopy=False)
    assert len(stored) == len(trials), (len(stored), len(trials))
    for number in (0, 1, len(trials) - 1):
        got, want = stored[number], trials[number]
        assert got.state == want.state and got.values == want.values, number
        assert got.params == want.params and got.user_attrs == want.user_attrs, number
        assert got.constraints == want.constraints, number


async def load(base: str, paths: list[str], clients: int) -> dict:
    """Send ``paths`` from ``clients`` concurrent clients; latency percentiles and req/s.

    Each client is its own ``httpx.AsyncClient`` holding one keep-alive connection, opened
    before the clock starts (one shared pool of 50 connections, and 50 TLS-ready clients
    created at once, cost the client more CPU than the server spends on a request).
    """
    headers = {"Authorization": f"Bearer {TOKEN}"}
    pool = [httpx.AsyncClient(base_url=base, headers=headers) for _ in range(clients)]
    await asyncio.gather(*(client.get(paths[0]) for client in pool))
    queue = list(reversed(paths))
    latencies: list[float] = []

    async def one_client(client: httpx.AsyncClient) -> None:
        while queue:
            path = queue.pop()
            start = time.perf_counter()
            response = await client.get(path)
            latencies.append(time.perf_counter() - start)
            response.raise_for_status()

    start = time.perf_counter()
    await asyncio.gather(*(one_client(client) for client in pool))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(client.aclose() for client in pool))
    latencies.sort()
    return {
        "n": len(latencies),
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "req_s": len(latencies) / elapsed,
    }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--storage", help="SQLAlchemy URL (default: SQLite in a temp dir)")
    parser.add_argument("--requests", type=int, default=2000, help="per run at 50 clients")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="automl-bench-api-") as tmp:
        workdir = Path(tmp)
        url = args.storage or f"sqlite:///{workdir}/bench.db"
        print(f"populating {args.trials} trials: {populate(url, args.trials):.1f} s")
        process, base = start_server(url, workdir, TOKEN)
        try:
            _report(base, process.pid, args.requests)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
            if args.storage:
                optuna.delete_study(study_name=STUDY, storage=url)


def _report(base: str, server_pid: int, requests: int) -> None:
    trials = f"/v1/studies/{STUDY}/trials"
    scenarios = {
        "pareto": [f"/v1/studies/{STUDY}/pareto"] * requests,
        "trials": [f"{trials}?offset={(i * 50) % 10_000}&limit=50" for i in range(requests)],
    }
    first = time.perf_counter()
    httpx.get(
        base + scenarios["pareto"][0], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120
    )
    print(f"first /pareto (reads all trials into the cache): {time.perf_counter() - first:.1f} s")
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; client loop {_RUN.__module__}"
    )
    print(
        f"{'route':8} {'clients':>7} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'req/s':>8} {'server CPU ms/req':>18}"
    )
    for route, paths in scenarios.items():
        for clients in (1, 50):
            count = requests if clients > 1 else requests // 4
            cpu = _cpu_s(server_pid)
            r = _RUN(load(base, paths[:count], clients))
            cpu_ms = 1000 * (_cpu_s(server_pid) - cpu) / (r["n"] + clients)
            print(
                f"{route:8} {clients:>7} {r['n']:>6} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f}"
                f" {r['req_s']:>8.0f} {cpu_ms:>18.2f}"
            )


if __name__ == "__main__":
    main()
