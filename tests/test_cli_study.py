"""``automl study ...`` through the real command: start, resume, signals, fronts, exports."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import onnxruntime as ort
import optuna

from automl.data import load_dataset

AUTOML = [sys.executable, "-m", "automl"]


def _values(trial: dict) -> tuple[float, float]:
    return trial["values"]["accuracy"], trial["values"]["latency_per_sample_ms"]


def test_study_end_to_end_through_the_cli(cli, tmp_path):
    out = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "3", "--name", "e2e",
        "--remeasure-front",
    )  # fmt: skip
    assert "Pareto front of e2e" in out.stdout
    assert "re-measured" in out.stdout

    front = json.loads(cli("study", "pareto", "e2e", "--json").stdout)
    assert front
    for a in front:
        assert not any(
            _values(b)[0] >= _values(a)[0] and _values(b)[1] <= _values(a)[1] and b != a
            for b in front
        )
    study = optuna.load_study(study_name="e2e", storage=cli.storage)
    assert study.metric_names == ["accuracy", "latency_per_sample_ms"]
    assert "automl_spec" in study.user_attrs

    info = json.loads(cli("study", "show", "e2e", "--json").stdout)
    assert info["state"] == "done" and info["counts"]["COMPLETE"] == 3
    listed = json.loads(cli("study", "list", "--json").stdout)
    assert [s["name"] for s in listed] == ["e2e"]

    best = max(front, key=lambda t: t["metrics"]["accuracy"])
    cli("study", "export", "e2e", "--best", "accuracy", "-o", "out/model.onnx")
    sidecar = json.loads((tmp_path / "out" / "model.json").read_text())
    assert sidecar["trial"] == best["number"] and sidecar["target"] == "cpu"
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"))
    data = load_dataset("digits", seed=0)
    batch = sidecar["candidate"]["batch_size"]  # accuracy is measured at the serving batch
    predictions = np.concatenate([
        session.run(None, {"input": data.x_test[i : i + batch]})[0].argmax(1)
        for i in range(0, len(data.x_test), batch)
    ])  # fmt: skip
    accuracy = float((predictions == data.y_test).mean())
    assert accuracy == best["metrics"]["test_accuracy"]  # the test split; the search saw val

    again = cli(
        "study",
        "start",
        "--space",
        "digits-mlp",
        "--n-trials",
        "3",
        "--name",
        "e2e",
        "--seed",
        "4",
        check=False,
    )
    assert again.returncode != 0 and "different spec" in again.stderr


def test_absent_target_is_refused_before_training(cli, tmp_path):
    started = time.monotonic()
    out = cli(
        "study", "start", "--target", "a100", "--space", "digits-gpu", "--n-trials", "2",
        check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "automl worker --target a100" in out.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "artifacts").exists()


def test_detach_creates_a_queued_study_for_remote_workers(cli):
    refused = cli("study", "start", "--target", "a100", "--name", "remote", "--detach", check=False)
    assert refused.returncode == 2 and "bits [8]" in refused.stderr  # the default space's int8
    assert "digits-gpu" in refused.stderr
    out = cli(
        "study", "start", "--target", "a100", "--space", "digits-gpu", "--name", "remote",
        "--detach",
    )  # fmt: skip
    assert "automl worker --target a100" in out.stdout
    info = json.loads(cli("study", "show", "remote", "--json").stdout)
    assert info["state"] == "queued" and info["counts"]["COMPLETE"] == 0


def test_an_npz_dataset_anywhere_is_used_and_a_malformed_one_refused_up_front(cli, tmp_path):
    digits = load_dataset("digits", seed=0)
    elsewhere = tmp_path / "elsewhere"  # not under the API's data root, ./data
    elsewhere.mkdir()
    arrays = {"x_train": digits.x_train, "y_train": digits.y_train}
    np.savez(elsewhere / "mine.npz", **arrays, x_test=digits.x_test, y_test=digits.y_test)
    np.savez(elsewhere / "half.npz", **arrays)
    args = ["study", "start", "--space", "digits-mlp", "--n-trials", "1", "--dataset"]
    cli(*args, str(elsewhere / "mine.npz"), "--name", "mine")
    assert json.loads(cli("study", "show", "mine", "--json").stdout)["counts"]["COMPLETE"] == 1
    out = cli(*args, str(elsewhere / "half.npz"), "--name", "half", check=False)
    assert out.returncode == 2 and "x_test" in out.stderr
    assert "half" not in cli("study", "list", "--json").stdout


def test_bad_input_is_a_clear_error(cli):
    out = cli("study", "start", "--sampler", "cmaes", check=False)
    assert out.returncode == 2 and "sampler" in out.stderr
    for command in (["list"], ["show", "nope"], ["pareto", "nope"], ["stop", "nope"]):
        out = cli("study", *command, "--storage", "sqlite:///typo/automl.db", check=False)
        assert out.returncode == 2 and "no storage at" in out.stderr, out.stderr
        assert not (cli.root / "typo").exists()  # read-only commands create no storage
    cli("study", "start", "--detach", "--space", "digits-mlp")
    out = cli("study", "show", "nope", check=False)
    assert out.returncode == 2 and "no study named 'nope'" in out.stderr
    out = cli("study", "start", "--dataset", "digts", "--detach", check=False)
    assert out.returncode == 2 and "unknown dataset 'digts'" in out.stderr
    x = np.ones((40, 4), np.float32)
    x[5, 2] = np.nan
    np.savez(
        cli.root / "nan.npz",
        x_train=x,
        y_train=np.arange(40) % 2,
        x_test=x,
        y_test=np.arange(40) % 2,
    )
    out = cli("study", "start", "--dataset", "nan.npz", "--detach", check=False)  # here: checked
    assert out.returncode == 2 and "NaN or infinite, the first at index (5, 2)" in out.stderr
    out = cli("study", "start", "--seed", "-1", check=False)
    assert out.returncode == 2 and "seed" in out.stderr and "Traceback" not in out.stderr
    out = cli("study", "list", "--storage", "postgresql://automl@127.0.0.1:1/automl", check=False)
    assert out.returncode == 2 and "error: cannot open the storage" in out.stderr
    assert "Traceback" not in out.stderr


def _count_state(storage: str, state: str) -> int:
    """Trials in ``state``."""
    return _count(storage, "SELECT count(*) FROM trials WHERE state = ?", state)


def _count(storage: str, query: str, *args: str) -> int:
    """A count, read-only: polling must not take write locks from the CLI under test."""
    path = storage.removeprefix("sqlite:///")
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            return db.execute(query, args).fetchone()[0]
    except sqlite3.OperationalError:  # no file or no tables yet
        return 0


def test_resume_after_kill_loses_no_completed_trial(cli, tmp_path):
    args = [*AUTOML, "study", "start", "--space", "digits-mlp", "--n-trials", "5", "--name", "r"]
    process = subprocess.Popen(
        args, cwd=tmp_path, env=cli.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while _count_state(cli.storage, "COMPLETE") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    study = optuna.load_study(study_name="r", storage=cli.storage)
    before = {t.number for t in study.trials if t.state.name == "COMPLETE"}
    assert len(before) >= 2

    cli("study", "start", "--space", "digits-mlp", "--n-trials", "5", "--name", "r")
    trials = optuna.load_study(study_name="r", storage=cli.storage).trials
    after = {t.number for t in trials if t.state.name == "COMPLETE"}
    assert before <= after and len(after) == 5
    assert not [t for t in trials if t.state.name == "RUNNING"]


def test_two_jobs_on_sqlite_complete_exactly_n(cli):
    out = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "4", "--name", "j", "--jobs", "2"
    )
    assert "locked" not in out.stderr
    trials = optuna.load_study(study_name="j", storage=cli.storage).trials
    assert sum(t.state.name == "COMPLETE" for t in trials) == 4
    assert not [t for t in trials if t.state.name == "FAIL"]
    assert len({t.number for t in trials}) == len(trials)
    assert np.unique([str(t.params) for t in trials]).size > 1


def test_sigterm_stops_study_start_and_its_jobs_after_their_trials(cli, tmp_path):
    args = [*AUTOML, "study", "start", "--space", "digits-mlp", "--n-trials", "40", "--jobs", "2"]
    process = subprocess.Popen(
        [*args, "--name", "t"], cwd=tmp_path, env=cli.env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while _count_state(cli.storage, "COMPLETE") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)  # as `kill`, systemd or docker stop send it: to one pid
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == 0, stderr
    trials = optuna.load_study(study_name="t", storage=cli.storage).trials
    assert not [t for t in trials if t.state.name in ("RUNNING", "FAIL")]
    assert sum(t.state.name == "COMPLETE" for t in trials) < 20


def test_a_second_ctrl_c_aborts_the_running_trial_and_records_why(cli, tmp_path):
    slow = tmp_path / "slow.yaml"  # one long trial, so that both signals land inside it
    slow.write_text(
        "name: slow\nparams:\n  arch.family: {type: fixed, value: cnn}\n"
        "  arch.width: {type: fixed, value: 48}\n  arch.depth: {type: fixed, value: 3}\n"
        "  arch.kernel_size: {type: fixed, value: 5}\n  train.epochs: {type: fixed, value: 100}\n"
    )
    args = [*AUTOML, "study", "start", "--space", str(slow), "--n-trials", "1", "--name", "c"]
    run = _Run(args, tmp_path, cli.env)
    run.wait_for("running 1")  # the progress line counts the trial while it runs
    run.process.send_signal(signal.SIGINT)
    run.wait_for("stop requested")  # logged above the live progress line
    run.process.send_signal(signal.SIGINT)
    stdout, stderr = run.finish(timeout=60)
    assert run.process.returncode == 130, stderr
    assert "second Ctrl-C" in stdout
    assert "Traceback" not in stdout + stderr
    assert "aborted by Ctrl-C: a trial it interrupted is marked FAIL" in stdout
    assert "resume with: automl study start --name c" in stdout
    (trial,) = optuna.load_study(study_name="c", storage=cli.storage).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["fail_reason"].startswith("interrupted")


class _Run:
    """A CLI process whose stdout a thread drains, so that a test can wait on what it shows.

    The environment makes rich draw its live progress line into the pipe, as on a terminal.
    """

    def __init__(self, args: list[str], cwd, env: dict[str, str], **popen) -> None:
        live = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1"}
        self.process = subprocess.Popen(
            args, cwd=cwd, env={**env, **live}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, **popen,
        )  # fmt: skip
        self._chunks: list[bytes] = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    @property
    def stdout(self) -> str:
        return b"".join(self._chunks).decode(errors="replace")

    def _drain(self) -> None:
        while chunk := os.read(self.process.stdout.fileno(), 65536):
            self._chunks.append(chunk)

    def wait_for(self, text: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stdout:
            assert self.process.poll() is None, f"exited before showing {text!r}"
            assert time.monotonic() < deadline, f"never showed {text!r}"
            time.sleep(0.1)

    def finish(self, timeout: float) -> tuple[str, str]:
        self.process.wait(timeout)
        self._reader.join()
        return self.stdout, self.process.stderr.read()


PACED = """name: paced
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: int, low: 16, high: 64, step: 16}
  arch.depth: {type: int, low: 1, high: 2}
  batch_size: {type: categorical, choices: [1, 32]}
  train.epochs: {type: fixed, value: %d}
"""


def test_ctrl_c_ends_with_the_front_and_a_resume_command_that_resumes(cli, tmp_path):
    paced = tmp_path / "paced.yaml"  # trials of seconds, so that Ctrl-C lands inside one
    paced.write_text(PACED % 150)
    args = ["study", "start", "--space", str(paced), "--n-trials", "3", "--name", "r"]
    process = subprocess.Popen(
        [*AUTOML, *args, "--storage", cli.storage], cwd=tmp_path, env=cli.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while _count_state(cli.storage, "RUNNING") == 0:
        assert process.poll() is None and time.monotonic() < deadline, "no trial started"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "Study r ended: stopped by Ctrl-C after its running trial." in stdout
    assert 1 <= _count_state(cli.storage, "COMPLETE") < 3  # the running trial was finished
    assert _count_state(cli.storage, "RUNNING") == _count_state(cli.storage, "FAIL") == 0
    assert "Pareto front of r on cpu" in stdout
    (line,) = [line for line in stdout.splitlines() if line.startswith("Resume with: ")]
    resume = shlex.split(line.removeprefix("Resume with: "))
    assert resume == ["automl", "study", "start", "--name", "r", "--storage", cli.storage]

    again = subprocess.run(
        [*AUTOML, *resume[1:]], cwd=tmp_path, env=cli.env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "Study r ended: done." in again.stdout
    study = optuna.load_study(study_name="r", storage=cli.storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert study.user_attrs["automl_spec"]["search_space"] == str(paced)


def test_ctrl_c_before_any_trial_completes_says_so(cli, tmp_path):
    paced = tmp_path / "paced.yaml"
    paced.write_text(PACED % 150)
    cli("study", "start", "--space", str(paced), "--n-trials", "1", "--name", "w", "--detach")
    # A worker elsewhere holds the only slot (with no heartbeat, it never goes stale), so the
    # study waits on it, in its trial loop, with no COMPLETE trial.
    optuna.load_study(study_name="w", storage=cli.storage).ask()
    run = _Run([*AUTOML, "study", "start", "--name", "w"], tmp_path, cli.env)
    run.wait_for("running 1")
    run.process.send_signal(signal.SIGINT)
    stdout, stderr = run.finish(timeout=120)
    assert run.process.returncode == 130, stderr
    assert "Study w ended: stopped by Ctrl-C after its running trial." in stdout
    assert "no complete trial yet" in stdout and "Pareto front" not in stdout
    assert "Resume with: automl study start --name w" in stdout


def test_two_quick_ctrl_c_abort_every_job_even_during_imports(cli, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text(PACED % 1000)
    args = [*AUTOML, "study", "start", "--space", str(slow), "--n-trials", "2", "--name", "q"]
    process = subprocess.Popen(
        [*args, "--jobs", "2"], cwd=tmp_path, env=cli.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while _count_state(cli.storage, "RUNNING") < 2:  # each trial imports torch as it starts
        assert process.poll() is None and time.monotonic() < deadline, "no two trials started"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal sends Ctrl-C: to the whole group
    time.sleep(0.5)  # a quick second press
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stdout + stderr
    assert "resume with: automl study start --name q --jobs 2" in stdout
    trials = optuna.load_study(study_name="q", storage=cli.storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    assert all(t.user_attrs["fail_reason"].startswith("interrupted") for t in trials)
    deadline = time.monotonic() + 30  # multiprocessing's resource tracker ends on its own
    while _group_alive(process.pid):
        assert time.monotonic() < deadline, "a helper process outlived the abort"
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_one_spec_on_two_targets_and_compare(cli):
    out = cli(
        "study",
        "start",
        "--space",
        "digits-gpu",
        "--target",
        "cpu,a100",
        "--n-trials",
        "2",
        "--name",
        "m",
    )
    assert "automl worker --target a100" in out.stdout
    states = {s["name"]: s["state"] for s in json.loads(cli("study", "list", "--json").stdout)}
    assert states == {"m-cpu": "done", "m-a100": "queued"}
    a100 = json.loads(cli("study", "show", "m-a100", "--json").stdout)["spec"]
    cpu = json.loads(cli("study", "show", "m-cpu", "--json").stdout)["spec"]
    assert {k: v for k, v in a100.items() if k not in ("name", "target")} == {
        k: v for k, v in cpu.items() if k not in ("name", "target")
    }
    cli("study", "start", "--space", "digits-gpu", "--n-trials", "2", "--name", "m2", "--seed", "1")
    comparison = json.loads(cli("study", "compare", "m-cpu", "m2", "--json").stdout)
    assert comparison["studies"] == {"m-cpu": "cpu", "m2": "cpu"}
    fronts = {
        name: len(json.loads(cli("study", "pareto", name, "--json").stdout))
        for name in ("m-cpu", "m2")
    }
    on_front = [name for row in comparison["candidates"] for name in row["fronts"]]
    assert {name: on_front.count(name) for name in fronts} == fronts


def test_a_study_that_fails_exits_1_and_resumes_with_retry_failed(cli):
    """Every trial fails (a learning rate that overflows); a fixed space then runs after
    --retry-failed, and a resume without it ends at once with exit 1 and the hint."""
    space = cli.root / "space.yaml"
    body = (
        "name: s\nparams:\n  arch.family: {type: fixed, value: mlp}\n"
        "  arch.width: {type: fixed, value: 8}\n  train.epochs: {type: fixed, value: 1}\n"
        "  finetune_epochs: {type: fixed, value: 0}\n"
        "  batch_size: {type: categorical, choices: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]}\n"
    )
    space.write_text(body + "  train.lr: {type: fixed, value: 1.0e+30}\n")
    args = ("study", "start", "--space", str(space), "--n-trials", "1", "--name", "f")
    out = cli(*args, check=False)
    assert out.returncode == 1, out.stderr
    assert "too many failed trials" in out.stdout and "--retry-failed" in out.stdout
    space.write_text(body + "  train.lr: {type: fixed, value: 0.01}\n")
    again = cli(*args, check=False)
    assert again.returncode == 1 and _count_state(cli.storage, "COMPLETE") == 0
    cli("study", "start", "--name", "f", "--retry-failed", "--no-remeasure-front")
    assert _count_state(cli.storage, "COMPLETE") == 1
