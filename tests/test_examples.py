"""The scripts in examples/, run as a user runs them: real processes (forked from the test
worker's zygote, see tests/zygote.py), a real `automl serve`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
import pytest
from cli_runs import free_port, start_serve, stop_server, wait_healthy

if TYPE_CHECKING:
    from zygote import Zygote

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TOKEN = "example-token-0123456789abcdef"

pytestmark = pytest.mark.slow


def _env(root: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "AUTOML_STORAGE": f"sqlite:///{root / 'automl.db'}",
        "AUTOML_ARTIFACTS_DIR": str(root / "artifacts"),
        **extra,
    }


def _run_example(
    zygote: Zygote, script: str, root: Path, env: dict, *args: str
) -> subprocess.CompletedProcess:
    """``python examples/SCRIPT ARGS`` in ``root``, forked from ``zygote``."""
    return zygote.python([str(EXAMPLES / script), *args], cwd=root, env=env, timeout=300)


def test_digits_search_prints_the_front_and_exports_the_best(
    tmp_path: Path, zygote: Zygote
) -> None:
    done = _run_example(zygote, "digits_search.py", tmp_path, _env(tmp_path), "--out", "best.onnx")
    assert done.returncode == 0, done.stderr
    assert "Pareto front of digits-example" in done.stdout
    exported = done.stdout.splitlines()[-1]
    assert exported.startswith("exported trial ")
    sidecar = json.loads((tmp_path / "best.json").read_text())
    assert exported.startswith(f"exported trial {sidecar['trial']} to best.onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "best.onnx")))
    assert (tmp_path / "automl.db").is_file()  # the settings' storage, not the default one

    again = _run_example(
        zygote, "digits_search.py", tmp_path, _env(tmp_path), "--out", "again.onnx"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[:-1] == done.stdout.splitlines()[:-1]  # resumed, done


def _start_serve(root: Path, port: int) -> subprocess.Popen:
    (root / "data").mkdir()
    env = _env(root, AUTOML_API_TOKENS=json.dumps([TOKEN]), AUTOML_DATA_ROOT=str(root / "data"))
    return start_serve(root, port, env)


def test_submit_over_rest_runs_a_study_on_automl_serve(tmp_path: Path, zygote: Zygote) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = _start_serve(tmp_path, port)
    try:
        wait_healthy(url, tmp_path, timeout_s=60)
        work = tmp_path / "client"
        work.mkdir()
        env = {**os.environ, "AUTOML_API_URL": url, "AUTOML_API_TOKEN": TOKEN}
        done = _run_example(zygote, "submit_over_rest.py", work, env, "--out", "model.onnx")
    finally:
        stop_server(server, 30)
    assert done.returncode == 0, done.stdout + done.stderr + (tmp_path / "serve.log").read_text()
    lines = done.stdout.splitlines()
    assert lines[0].startswith("submitted study digits-mlp-cpu-")
    assert "is done: 3 trials complete" in lines[1]
    assert lines[-1].startswith("downloaded trial ")
    onnx.checker.check_model(onnx.load(str(work / "model.onnx")))


def test_submit_over_rest_wants_a_token(tmp_path: Path, zygote: Zygote) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AUTOML_API_TOKEN"}
    done = _run_example(zygote, "submit_over_rest.py", tmp_path, env)
    assert done.returncode == 2
    assert "AUTOML_API_TOKEN" in done.stderr


def test_optimize_trained_exports_a_model_within_the_accuracy_budget(
    tmp_path: Path, zygote: Zygote
) -> None:
    # 4 trials, not its default 8: the baseline and three others, as fast to check
    done = _run_example(
        zygote,
        "optimize_trained.py",
        tmp_path,
        _env(tmp_path),
        "--out",
        "fast.onnx",
        "--n-trials",
        "4",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("optimize-example: speedup against accuracy drop")
    assert lines[1].startswith("  trial 0: 1.00x faster") and lines[1].endswith("<- baseline")
    sidecar = json.loads((tmp_path / "fast.json").read_text())
    assert lines[-1] == f"exported trial {sidecar['trial']} to fast.onnx"
    onnx.checker.check_model(onnx.load(str(tmp_path / "fast.onnx")))
