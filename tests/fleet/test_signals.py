"""GracefulStop: Ctrl-C and SIGTERM, once and twice, in this process and in `automl worker`."""

from __future__ import annotations

import gc
import io
import logging
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import ClassVar

import optuna
import pytest
from cli_runs import count_state

from automl.errors import Aborted
from automl.fleet.signals import GracefulStop
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.settings import Settings
from automl.storage.factory import open_storage


class _Held:
    """An object whose collection runs a callback, as SQLAlchemy's pooled connections do."""


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.001)


@pytest.fixture
def stop():
    installed = GracefulStop().install()
    yield installed
    installed.uninstall()


def test_a_first_ctrl_c_requests_a_stop_and_a_second_aborts(stop):
    signal.raise_signal(signal.SIGINT)
    assert stop.requested and not stop.aborted
    with pytest.raises(Aborted):
        signal.raise_signal(signal.SIGINT)
    assert stop.aborted


def test_an_abort_in_a_weakref_callback_is_raised_again_in_the_code_it_interrupted(stop):
    signal.raise_signal(signal.SIGINT)
    held = _Held()
    # Python swallows what a weakref callback raises: the second press must not be lost there.
    ref = weakref.ref(held, lambda _: signal.raise_signal(signal.SIGINT))
    with pytest.raises(Aborted):
        del held
        gc.collect()
        _busy(2.0)
    assert ref() is None and stop.aborted


def test_other_unraisable_errors_still_reach_the_previous_hook(stop, monkeypatch):
    seen = []
    monkeypatch.setattr(stop, "_previous_hook", seen.append)
    held = _Held()
    ref = weakref.ref(held, lambda _: 1 / 0)
    del held
    gc.collect()
    assert ref() is None
    assert [type(u.exc_value) for u in seen] == [ZeroDivisionError]


@pytest.fixture
def sigterm_stop():
    installed = GracefulStop().install(sigterm_aborts=True)
    yield installed
    installed.uninstall()


class _ReentrantStream(io.StringIO):
    """A stream that, as a BufferedWriter does, refuses a write inside a write; its first write
    is interrupted by a SIGTERM."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = False

    def write(self, text: str) -> int:
        if self.writing:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name=2>")
        self.writing = True
        try:
            if not self.getvalue():
                signal.raise_signal(signal.SIGTERM)
            return super().write(text)
        finally:
            self.writing = False


def test_a_signal_during_a_log_write_is_logged_after_it(sigterm_stop, monkeypatch):
    stream = _ReentrantStream()
    handler = logging.StreamHandler(stream)
    monkeypatch.setattr(logging, "raiseExceptions", True)
    logger = logging.getLogger("automl.fleet.signals")
    logger.addHandler(handler)
    try:
        logger.warning("the main thread writes")
        sigterm_stop.flush()
    finally:
        logger.removeHandler(handler)
    assert sigterm_stop.requested
    lines = stream.getvalue().splitlines()
    assert lines[0] == "the main thread writes"
    assert lines[1].startswith("stop requested by SIGTERM"), lines


def test_a_second_sigterm_aborts_where_asked(sigterm_stop):
    signal.raise_signal(signal.SIGTERM)
    assert sigterm_stop.requested and not sigterm_stop.aborted
    with pytest.raises(Aborted):
        signal.raise_signal(signal.SIGTERM)
    assert sigterm_stop.aborted and not sigterm_stop.interrupted


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_second_signal_whose_handler_runs_inside_the_first_one_s_aborts(
    sigterm_stop, monkeypatch, second
):
    read = sigterm_stop._read_wakeups

    def second_signal_lands() -> bytes:  # before the first handler has requested the stop
        monkeypatch.setattr(sigterm_stop, "_read_wakeups", read)
        signal.raise_signal(second)
        return read()

    monkeypatch.setattr(sigterm_stop, "_read_wakeups", second_signal_lands)
    with pytest.raises(Aborted):
        signal.raise_signal(signal.SIGTERM)
    assert sigterm_stop.aborted


def test_a_sigterm_passed_on_by_a_parent_is_not_counted_twice(stop):
    # systemd signals the whole group, and `automl serve` or `study start` passes it on too.
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGTERM)
    assert stop.requested and not stop.aborted


def test_ctrl_c_after_sigterm_aborts_and_sigterm_after_ctrl_c_does_not(stop):
    signal.raise_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches every process of the group,
    signal.raise_signal(signal.SIGTERM)  # and then the parent passes it on as SIGTERM
    assert stop.requested and not stop.aborted
    other = GracefulStop().install()
    try:
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(Aborted):
            signal.raise_signal(signal.SIGINT)
    finally:
        other.uninstall()


@pytest.mark.parametrize(
    ("mean_s", "said"),
    [
        (250.0, r"It has run (\d+) s, and its study's complete trials took 250 s on average: "
         r"about (\d+) s more\. A second SIGTERM \(or Ctrl-C\) stops it now \(it is marked "
         r"FAIL\)\."),
        (None, r"It has run (\d+) s; how long it takes is unknown: no trial of this study has "
         r"completed yet\. A second SIGTERM \(or Ctrl-C\) stops it now"),
    ],
)  # fmt: skip
def test_the_first_signal_says_how_long_the_running_trial_should_take(
    sigterm_stop, caplog, mean_s, said
):
    sigterm_stop.trial_begins(mean_s)
    with caplog.at_level("WARNING", logger="automl.fleet.signals"):
        signal.raise_signal(signal.SIGTERM)
        sigterm_stop.flush()
    (record,) = caplog.records
    message = record.getMessage()
    assert message.startswith("stop requested by SIGTERM: finishing the running trial")
    found = re.search(said, message)
    assert found, message
    ran, *more = (int(seconds) for seconds in found.groups())
    assert ran < 60, message  # however long this host paused since the trial began
    if more:  # what it has run and what it should still run add up to the mean, rounded
        assert abs(ran + more[0] - 250) <= 1, message


@pytest.fixture(autouse=True)
def _no_worker_outlives_its_test() -> Iterator[None]:
    """SIGKILL the workers a test leaves running: one that failed half way would otherwise
    run its trial of minutes on, an orphan, through the rest of the suite."""
    yield
    while _Worker.started:
        worker = _Worker.started.pop()
        if worker.process.poll() is None:
            worker.process.kill()


class _Worker:
    """`automl worker` (run by ``code``, or forked from ``zygote``), its stdout and stderr read
    by a thread."""

    started: ClassVar[list[_Worker]] = []

    def __init__(self, code: str | None, args: list[str], cli, zygote=None) -> None:
        if code is None:
            self.process = zygote.popen(args, cwd=cli.root, env=cli.env)
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, *args], cwd=cli.root, env=cli.env, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
        _Worker.started.append(self)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while text not in self.output:
            assert self.process.poll() is None, f"exited before {text!r}:\n{self.output}"
            assert time.monotonic() < deadline, f"never said {text!r}:\n{self.output}"
            time.sleep(0.1)

    def finish(self, timeout_s: float) -> str:
        self.process.wait(timeout_s)
        self._reader.join(10)
        return self.output


RUN_AUTOML = (
    "import runpy, sys; sys.argv[0] = 'automl'; runpy.run_module('automl', run_name='__main__')"
)
# A SIGTERM at a fixed point of the worker's start: while it imports its scheduler (and with
# it Optuna and SQLAlchemy), which takes seconds on a busy host.
SIGTERM_WHILE_LOADING = (
    "import os, signal, sys\n"
    "def hook(event, args):\n"
    "    if event == 'import' and args[0] == 'automl.fleet.scheduler':\n"
    "        os.kill(os.getpid(), signal.SIGTERM)\n"
    "sys.addaudithook(hook)\n" + RUN_AUTOML
)


def test_a_sigterm_while_the_worker_loads_is_a_requested_stop(cli):
    worker = _Worker(SIGTERM_WHILE_LOADING, ["worker", "--wait", "--storage", cli.storage], cli)
    output = worker.finish(timeout_s=120)
    assert worker.process.returncode == 0, output  # not 143 (-15): killed by the signal
    assert "stop requested by SIGTERM: no trial runs here, exiting" in output
    assert "worker done: 0 trial(s) run here" in output


# Trial 0 takes seconds and completes; trial 1 trains for many minutes, unless it is stopped.
TWO_PACES = """name: two-paces
params:
  arch.family: {type: fixed, value: cnn}
  arch.width: {type: fixed, value: 48}
  arch.depth: {type: fixed, value: 3}
  arch.kernel_size: {type: fixed, value: 5}
  bits: {type: fixed, value: 32}
  batch_size: {type: fixed, value: 1}
  train.epochs: {type: categorical, choices: [1, 1000]}
"""


def test_a_second_sigterm_stops_the_worker_s_running_trial_now(cli, zygote, tmp_path):
    (tmp_path / "paces.yaml").write_text(TWO_PACES)
    spec = {"name": "p", "search_space": str(tmp_path / "paces.yaml"), "n_trials": 2}
    study = create_study(parse_spec(spec), open_storage(cli.storage, Settings()))
    study.enqueue_trial({"train.epochs": 1})
    study.enqueue_trial({"train.epochs": 1000})
    worker = _Worker(None, ["worker", "--studies", "p"], cli, zygote)
    worker.wait_for("study p: starting a trial", timeout_s=300)
    deadline = time.monotonic() + 300
    while count_state(cli.storage, "COMPLETE") < 1 or count_state(cli.storage, "RUNNING") < 1:
        assert worker.process.poll() is None, worker.output
        assert time.monotonic() < deadline, f"trial 0 never completed:\n{worker.output}"
        time.sleep(0.1)
    worker.process.send_signal(signal.SIGTERM)
    worker.wait_for("stop requested by SIGTERM")
    started = time.monotonic()
    worker.process.send_signal(signal.SIGTERM)
    output = worker.finish(timeout_s=120)
    assert time.monotonic() - started < 60, output  # not the minutes the trial would take
    assert worker.process.returncode == 0, output  # a requested stop, as docs/cli.md says
    assert "its study's complete trials took" in output
    assert "A second SIGTERM (or Ctrl-C) stops it now (it is marked FAIL)" in output
    assert "aborted by a second SIGTERM: a trial it interrupted is marked FAIL" in output
    assert "Traceback" not in output
    first, second = optuna.load_study(study_name="p", storage=cli.storage).trials
    assert (first.state.name, second.state.name) == ("COMPLETE", "FAIL")
    assert second.user_attrs["fail_reason"].startswith("interrupted")
