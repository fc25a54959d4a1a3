"""``automl study start`` under signals: Ctrl-C once and twice, SIGTERM, with ``--jobs``."""

from __future__ import annotations

import os
import shlex
import signal
import time

import optuna
from cli_runs import AUTOML, PACED, CliRun, count_state, group_alive


def test_sigterm_stops_study_start_and_its_jobs_after_their_trials(cli, zygote, tmp_path):
    args = ["study", "start", "--space", "digits-mlp", "--n-trials", "40", "--jobs", "2"]
    process = zygote.popen([*args, "--name", "t"], cwd=tmp_path, env=cli.env, merge_stderr=False)
    deadline = time.monotonic() + 300
    while count_state(cli.storage, "COMPLETE") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)  # as `kill`, systemd or docker stop send it: to one pid
    stderr = process.communicate(timeout=120)[1]
    assert process.returncode == 0, stderr
    trials = optuna.load_study(study_name="t", storage=cli.storage).trials
    assert not [t for t in trials if t.state.name in ("RUNNING", "FAIL")]
    assert sum(t.state.name == "COMPLETE" for t in trials) < 20


def test_a_second_ctrl_c_aborts_the_running_trial_and_records_why(cli, zygote, tmp_path):
    slow = tmp_path / "slow.yaml"  # one long trial, so that both signals land inside it
    slow.write_text(
        "name: slow\nparams:\n  arch.family: {type: fixed, value: cnn}\n"
        "  arch.width: {type: fixed, value: 48}\n  arch.depth: {type: fixed, value: 3}\n"
        "  arch.kernel_size: {type: fixed, value: 5}\n  train.epochs: {type: fixed, value: 100}\n"
    )
    args = [*AUTOML, "study", "start", "--space", str(slow), "--n-trials", "1", "--name", "c"]
    run = CliRun(args, tmp_path, cli.env, zygote)
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


def test_ctrl_c_ends_with_the_front_and_a_resume_command_that_resumes(cli, zygote, tmp_path):
    paced = tmp_path / "paced.yaml"  # trials of seconds, so that Ctrl-C lands inside one
    paced.write_text(PACED % 150)
    args = ["study", "start", "--space", str(paced), "--n-trials", "2", "--name", "r"]
    models = ["--artifacts-dir", str(tmp_path / "models")]  # not the environment's
    process = zygote.popen(
        [*args, "--storage", cli.storage, *models], cwd=tmp_path, env=cli.env, merge_stderr=False
    )
    deadline = time.monotonic() + 120
    while count_state(cli.storage, "RUNNING") == 0:
        assert process.poll() is None and time.monotonic() < deadline, "no trial started"
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr
    assert "Study r ended: stopped by Ctrl-C after its running trial." in stdout
    assert 1 <= count_state(cli.storage, "COMPLETE") < 2  # the running trial was finished
    assert count_state(cli.storage, "RUNNING") == count_state(cli.storage, "FAIL") == 0
    assert "Pareto front of r on cpu" in stdout
    (line,) = [line for line in stdout.splitlines() if line.startswith("Resume with: ")]
    resume = shlex.split(line.removeprefix("Resume with: "))
    assert resume == ["automl", "study", "start", "--name", "r", "--storage", cli.storage, *models]

    again = cli(*resume[1:])
    assert "Study r ended: done." in again.stdout
    study = optuna.load_study(study_name="r", storage=cli.storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 2
    assert study.user_attrs["automl_spec"]["search_space"] == str(paced)


def test_ctrl_c_before_any_trial_completes_says_so(cli, zygote, tmp_path):
    paced = tmp_path / "paced.yaml"
    paced.write_text(PACED % 150)
    cli("study", "start", "--space", str(paced), "--n-trials", "1", "--name", "w", "--detach")
    # A worker elsewhere holds the only slot (with no heartbeat, it never goes stale), so the
    # study waits on it, in its trial loop, with no COMPLETE trial.
    optuna.load_study(study_name="w", storage=cli.storage).ask()
    run = CliRun([*AUTOML, "study", "start", "--name", "w"], tmp_path, cli.env, zygote)
    run.wait_for("running 1")
    run.process.send_signal(signal.SIGINT)
    stdout, stderr = run.finish(timeout=120)
    assert run.process.returncode == 130, stderr
    assert "Study w ended: stopped by Ctrl-C after its running trial." in stdout
    assert "no complete trial yet" in stdout and "Pareto front" not in stdout
    assert "Resume with: automl study start --name w" in stdout


def test_two_quick_ctrl_c_abort_every_job_even_during_imports(cli, zygote, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text(PACED % 1000)
    args = ["study", "start", "--space", str(slow), "--n-trials", "2", "--name", "q", "--jobs", "2"]
    process = zygote.popen(args, cwd=tmp_path, env=cli.env, merge_stderr=False)  # a new session
    deadline = time.monotonic() + 180
    while count_state(cli.storage, "RUNNING") < 2:  # each trial imports torch as it starts
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
    while group_alive(process.pid):
        assert time.monotonic() < deadline, "a helper process outlived the abort"
        time.sleep(0.1)


def test_a_second_sigterm_aborts_every_job_now_and_says_so_first(cli, zygote, tmp_path):
    slow = tmp_path / "slow.yaml"
    slow.write_text(PACED % 1000)
    args = [*AUTOML, "study", "start", "--space", str(slow), "--n-trials", "2", "--name", "k"]
    run = CliRun([*args, "--jobs", "2"], tmp_path, cli.env, zygote)  # in a new session
    deadline = time.monotonic() + 180
    while count_state(cli.storage, "RUNNING") < 2:
        assert run.process.poll() is None and time.monotonic() < deadline, "no two trials started"
        time.sleep(0.05)
    os.killpg(run.process.pid, signal.SIGTERM)  # as systemd stops a unit: the whole group
    run.wait_for("stop requested by SIGTERM")
    time.sleep(2)  # the helper got it twice (from systemd and from job 0): still one request
    assert count_state(cli.storage, "RUNNING") == 2
    os.killpg(run.process.pid, signal.SIGTERM)
    stdout, stderr = run.finish(timeout=120)
    assert run.process.returncode == 0, stderr  # SIGTERM is a requested stop, as docs/cli.md says
    said = " ".join(stdout.split())  # the console wraps long lines
    assert "how long it takes is unknown: no trial of this study has completed yet" in said
    assert "A second SIGTERM (or Ctrl-C) stops it now (it is marked FAIL)" in said
    assert "Study k ended: aborted by a second SIGTERM" in stdout
    assert "Resume with: automl study start --name k --jobs 2" in stdout
    assert "Traceback" not in stdout + stderr
    trials = optuna.load_study(study_name="k", storage=cli.storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "FAIL"]
    assert all(t.user_attrs["fail_reason"].startswith("interrupted") for t in trials)
