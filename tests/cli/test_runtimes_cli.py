"""The runtime knob from the command line: a study on ONNX Runtime and OpenVINO, and the refusal
where OpenVINO is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from conftest import run_cli_study

if TYPE_CHECKING:
    from pathlib import Path

SPEC = {"name": "rt", "search_space": "digits-runtimes", "target": "cpu", "n_trials": 2}
ENQUEUED = [
    {"runtime": runtime, "method": "int8-static", "batch_size": 8, "arch.width": 16,
     "arch.depth": 1, "pruning_ratio": 0.0}
    for runtime in ("openvino", "ort-cpu")
]  # fmt: skip


def test_a_study_searches_the_runtime_and_each_row_names_its_own(tmp_path, zygote) -> None:
    run = run_cli_study(tmp_path, SPEC, ENQUEUED, zygote)

    trials = run["study"].get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    for trial in trials:
        attrs = trial.user_attrs
        runtime = trial.params["runtime"]
        assert attrs["history"]["deployment"]["runtime"] == runtime
        assert attrs["env"]["backend"] == runtime and attrs["latency"]["backend"] == runtime
    wide = {**run["env"], "COLUMNS": "200"}  # one line a row
    pareto = zygote.run(["study", "pareto", "rt"], cwd=tmp_path, env=wide, timeout=120)
    rows = [line for line in pareto.stdout.splitlines() if "mobilenet" in line]
    assert rows and all(" on ort-cpu" in r or " on openvino" in r for r in rows), pareto.stdout


def _without_openvino(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python finds no openvino package, as a host without it."""
    shadow = tmp_path / "shadow" / "openvino"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'openvino'\")\n")
    path = os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "AUTOML_STORAGE": f"sqlite:///{tmp_path}/s.db",
            "AUTOML_ARTIFACTS_DIR": str(tmp_path / "artifacts"), "COLUMNS": "200"}  # fmt: skip


def test_without_openvino_the_space_is_refused_in_one_line_and_targets_say_so(tmp_path) -> None:
    env = _without_openvino(tmp_path)

    def automl(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "automl", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip

    refused = automl("study", "start", "--space", "digits-runtimes", "--target", "cpu")
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if "openvino" in line]
    assert len(lines) == 1 and "cannot start on this machine" in lines[0], refused.stderr
    assert "pip install 'automl[openvino]'" in lines[0]
    assert "trial" not in refused.stdout  # refused before any training
    assert json.loads(automl("study", "list", "--json").stdout) == []
    (cpu,) = [t for t in json.loads(automl("targets", "--json").stdout) if t["name"] == "cpu"]
    assert cpu["present"] and cpu["runtimes"]["ort-cpu"]["present"]
    assert not cpu["runtimes"]["openvino"]["present"]
    assert "not installed" in cpu["runtimes"]["openvino"]["reason"]
