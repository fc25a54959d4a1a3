"""The test suite's own machinery: what ``make test`` relies on to run in two processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# Plugins that a pytest run of the suite's own machinery does not use: each costs every process
# about 3 s of imports (schemathesis, with hypothesis).
UNUSED_PLUGINS = ("-p", "no:schemathesis", "-p", "no:hypothesispytest", "-p", "no:anyio")


def test_an_xdist_group_runs_whole_in_one_worker(tmp_path) -> None:
    """``--dist loadgroup`` keeps a marked module on one worker, where its module fixtures run
    once (tests/trials/test_families.py relies on it)."""
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.xdist_group('together')\n"
        "@pytest.mark.parametrize('i', range(8))\n"
        "def test_it(i):\n    pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *UNUSED_PLUGINS, "-n",
         "2", "--dist", "loadgroup", "-o", "addopts=", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    workers = set(re.findall(r"\[(gw\d)\] .* PASSED", done.stdout))
    assert done.returncode == 0 and len(workers) == 1, done.stdout


def test_modules_of_background_tests_run_last() -> None:
    """A ``background`` test waits on work started at collection: its module is handed out
    after every other, slow ones included, so that the work runs while they do."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *UNUSED_PLUGINS, "tests/test_gpu_install.py", "tests/test_readme.py"],
        capture_output=True, text=True, cwd=root, check=True,
    )  # fmt: skip
    modules = [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]
    assert modules[0] == "tests/test_readme.py" and modules[-1] == "tests/test_gpu_install.py"


def test_a_command_run_by_the_zygote_behaves_as_a_fresh_interpreter(zygote, tmp_path) -> None:
    """The `cli` fixture's zygote (tests/zygote.py): the same exit status and output as a fresh
    ``python -m automl``, in the folder and with the environment and PYTHONPATH asked for."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "my_data.py").write_text("def load():\n    raise RuntimeError('mine')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "mine"), "COLUMNS": "100"}
    env["AUTOML_STORAGE"] = f"sqlite:///{tmp_path}/automl.db"
    for args in (  # an error of the user's module on their PYTHONPATH, then a success
        ["study", "start", "--space", "digits-mlp", "--dataset", "my_data:load"],
        ["spaces"],
    ):
        forked = zygote.run(args, cwd=tmp_path, env=env, timeout=120)
        fresh = subprocess.run(
            [sys.executable, "-m", "automl", *args], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert forked.returncode == fresh.returncode, (forked.stderr, fresh.stderr)
        assert (forked.stdout, forked.stderr) == (fresh.stdout, fresh.stderr)
    assert forked.returncode == 0 and "digits-mlp" in forked.stdout


def test_a_command_the_zygote_cannot_start_fails_instead_of_hanging(zygote, tmp_path) -> None:
    """A forked command that fails before automl runs (here, its folder is gone) ends with
    status 1 and says why: ending through the interpreter instead, it would hang in ONNX
    Runtime's destructors (its telemetry thread lives only in the zygote)."""
    env = {**os.environ, "AUTOML_STORAGE": f"sqlite:///{tmp_path}/automl.db"}
    done = zygote.run(["spaces"], cwd=tmp_path / "gone", env=env, timeout=30)
    assert done.returncode == 1 and "FileNotFoundError" in done.stderr, done
    assert zygote.run(["spaces"], cwd=tmp_path, env=env, timeout=60).returncode == 0
