"""The top-level ``automl`` command: its help, its sub-commands, and the worker's errors."""

from __future__ import annotations

import subprocess
import sys


def test_help_does_not_import_torch():
    code = "import sys, automl.cli; sys.argv=['automl','--help']\ntry:\n automl.cli.app()\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False")


def test_help_lists_the_commands_the_study_group_and_plugins(cli):
    top = cli("--help").stdout
    for name in ("targets", "worker", "dashboard", "serve", "study"):
        assert f"│ {name} " in top, top
    study = cli("study", "--help").stdout
    for name in ("start", "list", "show", "pareto", "export", "compare", "report", "stop"):
        assert f"│ {name} " in study, study


def test_worker_on_an_unreachable_storage_is_a_clear_error(cli):
    out = cli("worker", "--storage", "postgresql://automl@127.0.0.1:1/automl", check=False)
    assert out.returncode == 2 and "error: cannot open the storage" in out.stderr
    assert "Traceback" not in out.stderr
