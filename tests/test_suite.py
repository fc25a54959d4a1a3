"""The test suite's own machinery: what ``make test`` relies on to run in two processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from zygote import BIN, SOCKET_VARIABLE

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


def _shell_env(zygote, *folders: Path, **variables: str) -> dict[str, str]:
    """A shell's environment as the README's blocks have it: tests/bin first on the PATH (the
    zygote's ``automl``), then ``folders`` and the venv's bin."""
    path = os.pathsep.join(
        [*map(str, folders), str(Path(sys.executable).parent), os.environ["PATH"]]
    )
    return zygote.client_env({**os.environ, "PATH": path, **variables})


def test_automl_through_the_zygote_client_behaves_as_the_fresh_command(zygote, tmp_path) -> None:
    """``tests/bin/automl``, which the README's blocks run: the same exit status and output as
    the venv's own ``automl``, for an automl error and a success (its usage line names it
    ``automl``, as the console script is named, not ``python -m automl``)."""
    variables = {"COLUMNS": "100", "AUTOML_STORAGE": f"sqlite:///{tmp_path}/automl.db"}
    automl = Path(sys.executable).with_name("automl")
    for args in (["study", "show", "nothing"], ["--help"]):
        forked = subprocess.run(
            [BIN / "automl", *args], cwd=tmp_path, env=_shell_env(zygote, **variables),
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        fresh = subprocess.run(
            [automl, *args], cwd=tmp_path, env={**os.environ, **variables}, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            fresh.returncode, fresh.stdout, fresh.stderr,
        )  # fmt: skip
    assert forked.returncode == 0 and "Usage: automl [OPTIONS]" in forked.stdout


# An `automl` that says whether it was forked from the zygote (its libraries are loaded), then
# sleeps if asked to: on one line, so that an interrupt's traceback is the same wherever it lands.
FAKE_AUTOML = """#!/usr/bin/env python3
import sys, time
print('torch' in sys.modules, sys.argv[1:], flush=True); time.sleep(60 * (sys.argv[1:] == ['sleep']))
"""


CARETS = re.compile(r"^ *\^+\n", re.M)  # where in its line a traceback's interrupt landed


def _fake_automl_env(zygote, folder: Path) -> dict[str, str]:
    """A shell's environment with :data:`FAKE_AUTOML` in ``folder``, after tests/bin."""
    (folder / "automl").write_text(FAKE_AUTOML)
    (folder / "automl").chmod(0o755)
    return _shell_env(zygote, folder)


def test_the_zygote_client_forks_the_next_automl_on_the_path_or_execs_it(zygote, tmp_path):
    """``tests/bin/automl`` forks the ``automl`` that follows it on the PATH from the zygote,
    and execs it where the socket is unset or Python's start-up variables differ."""
    env = _fake_automl_env(zygote, tmp_path)
    for changed, forked in (
        ({}, True),
        ({SOCKET_VARIABLE: ""}, False),
        ({"PYTHONHASHSEED": "0"}, False),
    ):
        done = subprocess.run(
            [BIN / "automl", "a", "b c"], cwd=tmp_path, env={**env, **changed},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (done.returncode, done.stdout) == (0, f"{forked} ['a', 'b c']\n"), done.stderr


def _as_a_shell_starts_it() -> None:
    """Ctrl-C at its default, as a shell's foreground job has it: pytest-xdist's workers ignore
    it, and an ignored SIGINT is inherited through exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_signal_sent_to_the_zygote_client_reaches_its_command(zygote, tmp_path) -> None:
    """SIGINT or SIGTERM sent to ``tests/bin/automl`` ends the command forked from the zygote as
    it ends the same command exec'd: the same death by that signal, and the same stderr."""
    env = _fake_automl_env(zygote, tmp_path)
    for signum in (signal.SIGINT, signal.SIGTERM):
        ended = []
        for forked in (True, False):
            process = subprocess.Popen(
                [BIN / "automl", "sleep"], cwd=tmp_path, stdout=subprocess.PIPE, text=True,
                stderr=subprocess.PIPE, env=env if forked else {**env, SOCKET_VARIABLE: ""},
                preexec_fn=_as_a_shell_starts_it,
            )  # fmt: skip
            assert process.stdout.readline() == f"{forked} ['sleep']\n"
            process.send_signal(signum)
            _, err = process.communicate(timeout=60)
            ended.append((process.returncode, CARETS.sub("", err)))
        assert ended[0] == ended[1] and ended[0][0] == -signum, ended
