"""Helpers shared by the benchmarks: a quiet study run, a model served as a serving study serves
it, the API server in a process, and the bootstrap interval of a ratio of means."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import optuna

from automl.candidate import Batching
from automl.fleet.study_loop import run_study_loop
from automl.pipeline.latency import measure_latency
from automl.search.spec import Serving, parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage
from automl.targets import load_target
from automl.trials.screen import RateToBeat, serve_screened


def run_study(workdir: Path, *, enqueue: list[dict] | None = None, cache: bool = True, **spec):
    """Run one study in ``workdir`` and return (study, settings) once it is done."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("automl").setLevel(logging.WARNING)
    workdir.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        storage=f"sqlite:///{workdir}/bench.db",
        artifacts_dir=workdir / "artifacts",
        cache_enabled=cache,
    )
    storage = open_storage(settings.storage, settings)
    study = create_study(parse_spec(spec), storage)
    for params in enqueue or []:
        study.enqueue_trial(params)
    run_study_loop(
        study.study_name, storage, artifact_store=open_artifact_store(settings), settings=settings
    )
    return optuna.load_study(study_name=study.study_name, storage=storage), settings


class Server:
    """One exported model on the CPU target, served at a batching setting as a serving study's
    trial serves it (:func:`automl.trials.screen.serve_screened`)."""

    def __init__(
        self,
        path: Path,
        rows: np.ndarray,
        scenario: Serving,
        batches: tuple[int, ...],
        method: str,
        seed: int = 0,
    ) -> None:
        self.path, self.rows, self.scenario, self.method = path, rows, scenario, method
        self.seed = seed  # of the arrival schedules
        self.target = load_target("cpu")
        self.p50_ms = {  # isolated, at each max_batch: where a search starts, and its bound
            b: measure_latency(path, self.target, rows, b, method=method).p50_ms for b in batches
        }

    def serve(
        self, setting: Batching, to_beat: RateToBeat | None = None, probes: int | None = None
    ) -> tuple[float, int]:
        """The max rate (0 where screened against ``to_beat``) and the load runs it took, the
        floor's included; ``probes`` runs at most in its search, where not a study's."""
        served = serve_screened(
            self.path, self.target, self.rows, setting, self.p50_ms[setting.max_batch],
            self.scenario, batch_size=setting.max_batch, method=self.method, to_beat=to_beat,
            seed=self.seed, probes=probes,
        )  # fmt: skip
        runs = served["record"].get("runs", [])
        return served["metrics"].get("max_rate_rps", 0.0), len(runs) + 1 if runs else 0


def start_server(url: str, workdir: Path, token: str) -> tuple[subprocess.Popen, str]:
    """``api.serve.serve`` without workers on a free loopback port, in its own process.

    Returns:
        The process (its log is ``workdir/server.log``) and the base URL, once ``/healthz`` is up.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "AUTOML_API_TOKENS": json.dumps([token])}
    env["AUTOML_ARTIFACTS_DIR"] = str(workdir / "artifacts")
    env["AUTOML_DATA_ROOT"] = str(workdir / "data")
    code = f"from api.serve import serve; serve('127.0.0.1', {port}, 0, {url!r})"
    log = (workdir / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=workdir, stderr=log)
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{base}/healthz").status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the server did not start; see {workdir / 'server.log'}")


BOOTSTRAP = 10_000


def ratio_interval(
    default: list[float], random: list[float], groups: list[int] | None = None, seed: int = 0
) -> tuple[float, ...]:
    """The ratio of means, default over random, and its paired 95 % bootstrap interval.

    With ``groups`` (one label per pair: its pretrained model), pairs are resampled within their
    group, so that every model keeps its share of the mean.
    """
    pairs = np.array([default, random])
    labels = np.zeros(pairs.shape[1], dtype=int) if groups is None else np.asarray(groups)
    rng = np.random.default_rng(seed)
    picks = np.concatenate(
        [
            rng.choice(members, size=(BOOTSTRAP, members.size))
            for members in (np.flatnonzero(labels == label) for label in np.unique(labels))
        ],
        axis=1,
    )
    means = pairs[:, picks].mean(axis=2)
    ratios = means[0] / np.maximum(means[1], 1e-12)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(pairs[0].mean() / max(pairs[1].mean(), 1e-12)), float(low), float(high)
