"""Fuzz the API with schemathesis against its own ``/openapi.json``, token included.

Run: ``.venv/bin/python -m bench.api_fuzz [--max-examples 30] [--seed 1]``.
A study named ``example`` (the documented example of ``{name}``) gets one real trial first,
so the generated requests also reach a real trial and its ONNX model. The server is
``api.serve.serve`` with no workers; schemathesis runs every check and every phase.
Prints generated cases and failures by code: ST101/ST102 are server errors, ST103-ST111
responses that break the documented schema.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import optuna

from automl.fleet.study_loop import run_study_loop
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_artifact_store, open_storage
from bench._common import start_server

TOKEN = "fuzz-token-0123456789"
SERVER_ERRORS = {"ST101", "ST102"}
SCHEMA_VIOLATIONS = {f"ST1{n:02d}" for n in range(3, 12)}


def prepare(workdir: Path) -> str:
    """A SQLite storage holding study ``example`` with one real trial; returns its URL."""
    url = f"sqlite:///{workdir}/fuzz.db"
    settings = Settings(_env_file=None, storage=url, artifacts_dir=workdir / "artifacts")
    storage = open_storage(url, settings)
    spec = parse_spec({"name": "example", "search_space": "digits-mlp", "n_trials": 1})
    create_study(spec, storage)
    artifacts = open_artifact_store(settings)
    run_study_loop("example", storage, artifact_store=artifacts, settings=settings)
    return url


def fuzz(base: str, report: Path, max_examples: int, seed: int) -> dict:
    """Run schemathesis with every check; returns its JSON report."""
    cli = Path(sys.executable).parent / "schemathesis"
    subprocess.run(
        [
            str(cli), "run", f"{base}/openapi.json",
            "-H", f"Authorization: Bearer {TOKEN}",
            "--checks", "all", "--max-examples", str(max_examples), "--seed", str(seed),
            "--report", "json", "--report-json-path", str(report),
        ],
        check=False,
    )  # fmt: skip
    return json.loads(report.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--max-examples", type=int, default=30, help="per operation")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="automl-fuzz-") as tmp:
        workdir = Path(tmp)
        (workdir / "data").mkdir()
        process, base = start_server(prepare(workdir), workdir, TOKEN)
        try:
            result = fuzz(base, workdir / "report.json", args.max_examples, args.seed)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
        server_log = (workdir / "server.log").read_text()
    failures = Counter({f["code"]: f["count"] for f in result["failures"]})
    cases = result["test_cases"]
    print(f"operations tested: {result['operations']['tested']}/{result['operations']['total']}")
    print(f"generated cases: {cases['generated']} (seed {args.seed})")
    print(f"server errors (ST101/ST102): {sum(failures[c] for c in SERVER_ERRORS)}")
    print(f"schema violations (ST103-ST111): {sum(failures[c] for c in SCHEMA_VIOLATIONS)}")
    print(f"all failures by code: {dict(failures) or 'none'}")
    print(f"tracebacks in the server log: {server_log.count('Traceback')}")


if __name__ == "__main__":
    main()
