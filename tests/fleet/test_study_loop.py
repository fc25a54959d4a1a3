"""`automl worker` processes sharing a study in PostgreSQL: exact counts, crashes, signals."""

from __future__ import annotations

import os
import re
import signal
import time

import optuna
import pytest
from conftest import PgProxy, pg_schema
from zygote import ForkedProcess

from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.studies import get_study
from automl.settings import Settings
from automl.storage.factory import open_storage

# Worker processes and storage outages: end to end (not in make test-fast).
pytestmark = pytest.mark.e2e

SPACE = """name: quick
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: int, low: 16, high: 64, step: 16}
  arch.depth: {type: int, low: 1, high: 2}
  pruning_ratio: {type: float, low: 0.0, high: 0.5, step: 0.1}
  bits: {type: categorical, choices: [32, 8]}
  batch_size: {type: categorical, choices: [1, 32]}
  train.epochs: {type: fixed, value: %d}
"""


@pytest.fixture
def fleet(tmp_path, zygote):
    with pg_schema() as url:
        env = {
            **os.environ,
            "AUTOML_STORAGE": url,
            "AUTOML_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "AUTOML_HEARTBEAT_INTERVAL_S": "1",
            "AUTOML_GRACE_PERIOD_S": "3",
            "AUTOML_POOL_SIZE": "1",
            "AUTOML_CACHE_ENABLED": "false",
        }
        settings = Settings(storage=url, heartbeat_interval_s=1, grace_period_s=3)
        storage = open_storage(url, settings)

        def study(name: str, n_trials: int, epochs: int = 2, target: str = "cpu") -> optuna.Study:
            space = tmp_path / f"{name}.yaml"
            bits = "[32, 8]" if target == "cpu" else "[32, 16]"  # NVIDIA targets: no int8
            space.write_text(SPACE.replace("[32, 8]", bits) % epochs)
            spec = {
                "name": name,
                "search_space": str(space),
                "n_trials": n_trials,
                "target": target,
            }
            create_study(parse_spec(spec), storage)
            return optuna.load_study(study_name=name, storage=storage)

        def worker(*args: str) -> ForkedProcess:
            """A real worker process, forked from the zygote: its imports are done once."""
            return zygote.popen(["worker", *args], cwd=tmp_path, env=env)

        yield study, worker


def _states(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for trial in study.get_trials(deepcopy=False):
        counts[trial.state.name] = counts.get(trial.state.name, 0) + 1
    return counts


def _running_on(study: optuna.Study, pid: int, timeout: float = 120) -> optuna.trial.FrozenTrial:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for trial in study.get_trials(deepcopy=False):
            mine = trial.user_attrs.get("worker", "").endswith(f":{pid}")
            if trial.state.name == "RUNNING" and mine and "candidate" in trial.user_attrs:
                return trial
        time.sleep(0.05)
    raise AssertionError(f"worker {pid} never ran a trial")


def _read_again(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    """``trial`` as stored now. On PostgreSQL a trial list reads params and attrs in separate
    statements, so a snapshot taken while the trial ran can show its candidate and lack a param.
    """
    return study._storage.get_trial(trial._trial_id)


def test_three_workers_reach_exactly_n_complete(fleet):
    make_study, worker = fleet
    study = make_study("shared", n_trials=6)
    workers = [worker("--target", "cpu", "--studies", "shared") for _ in range(3)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], outputs
    states = _states(study)
    assert states["COMPLETE"] == 6 and set(states) <= {"COMPLETE", "PRUNED"}
    # Two workers may pass the free-slot check at once: the later trial is pruned unrun.
    for trial in study.get_trials(states=(optuna.trial.TrialState.PRUNED,)):
        assert trial.user_attrs["over_budget"] and "candidate" not in trial.user_attrs
    numbers = [t.number for t in study.get_trials()]
    assert len(set(numbers)) == len(numbers)
    assert sum("trial" in out and "shared" in out for out in outputs) >= 2
    complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len({t.user_attrs["worker"] for t in complete}) >= 2  # pruned ones never began
    # Workers started together on an empty study must not share a sampler seed.
    seeds = re.findall(r"study shared: sampler default, seed (\d+)", "".join(outputs))
    assert len(seeds) >= 2 and len(set(seeds)) == len(seeds), outputs


def test_sigkilled_worker_trial_is_failed_and_retried(fleet):
    make_study, worker = fleet
    study = make_study("crash", n_trials=2, epochs=15)
    victim = worker("--target", "cpu", "--studies", "crash")
    killed = _running_on(study, victim.pid)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    survivor = worker("--target", "cpu", "--studies", "crash")
    output = survivor.communicate(timeout=600)[0]
    assert survivor.returncode == 0, output
    trials = study.get_trials()
    assert _states(study) == {"COMPLETE": 2, "FAIL": 1}
    assert next(t for t in trials if t.number == killed.number).state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retries) == 1 and retries[0].params == _read_again(study, killed).params
    assert retries[0].state.name == "COMPLETE"
    (failure,) = get_study("crash", study._storage).failures
    assert (failure["number"], failure["retried_as"]) == (killed.number, retries[0].number)


def test_a_trial_reaped_while_it_runs_is_dropped_and_the_worker_goes_on(fleet):
    make_study, worker = fleet
    study = make_study("reaped", n_trials=2, epochs=15)
    process = worker("--target", "cpu", "--studies", "reaped")
    trial = _running_on(study, process.pid)
    # What a reaper does to a trial whose heartbeats stopped reaching the storage.
    study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    retry(study, study._storage.get_trial(trial._trial_id))
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    assert "failed by a reaper while it ran here" in output
    assert _states(study) == {"COMPLETE": 2, "FAIL": 1}
    (retried,) = [t for t in study.trials if t.system_attrs.get("failed_trial") == trial.number]
    assert retried.state.name == "COMPLETE" and retried.params == _read_again(study, trial).params


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_sigterm_or_ctrl_c_finishes_the_running_trial_and_exits(fleet, signum, code):
    make_study, worker = fleet
    name = f"stop-{signum}"
    study = make_study(name, n_trials=3, epochs=10)
    process = worker("--target", "cpu", "--studies", name)
    running = _running_on(study, process.pid)
    process.send_signal(signum)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == code, output  # a requested stop: 0; Ctrl-C: 130, as the shell
    assert study._storage.get_trial(running._trial_id).state.name == "COMPLETE"
    assert "RUNNING" not in _states(study)
    assert _states(study)["COMPLETE"] < 3


def test_a_second_ctrl_c_aborts_the_worker_trial_without_a_traceback(fleet):
    make_study, worker = fleet
    study = make_study("abort", n_trials=2, epochs=1000)  # long: both presses land inside it
    process = worker("--target", "cpu", "--studies", "abort")
    running = _running_on(study, process.pid)
    process.send_signal(signal.SIGINT)
    output = ""
    while "stop requested" not in output and (line := process.stdout.readline()):
        output += line
    process.send_signal(signal.SIGINT)
    output += process.communicate(timeout=120)[0]
    assert process.returncode == 130, output
    assert "Traceback" not in output
    trial = study._storage.get_trial(running._trial_id)
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["fail_reason"].startswith("interrupted")


def test_worker_refuses_a_target_it_does_not_have(fleet):
    make_study, worker = fleet
    study = make_study("gpu", n_trials=2, target="a100")
    refused = worker("--target", "a100", "--studies", "gpu")
    output = refused.communicate(timeout=120)[0]
    assert refused.returncode != 0 and "automl worker --target a100" in output
    named = worker("--auto", "--studies", "gpu")
    output = named.communicate(timeout=120)[0]
    assert named.returncode == 3 and "measured on 'a100', which this worker does not" in output
    unknown = worker("--auto", "--studies", "nosuch")
    output = unknown.communicate(timeout=120)[0]
    assert unknown.returncode == 2 and "no study named 'nosuch'" in output
    idle = worker("--auto")  # serves what it can; the a100 study waits for an a100 worker
    output = idle.communicate(timeout=120)[0]
    assert idle.returncode == 0, output
    assert study.get_trials() == []


def test_reaper_fails_stale_trials_without_live_workers(fleet):
    from automl.storage.reaper import reap_all

    make_study, _ = fleet
    study = make_study("stale", n_trials=2)
    study.ask()  # RUNNING, with the heartbeat it got when created; then its worker dies
    time.sleep(3.5)
    assert reap_all(study._storage) == 1
    states = _states(study)
    assert states == {"FAIL": 1, "WAITING": 1}


def test_trials_whose_worker_died_before_its_heartbeat_thread_started_are_retried(fleet):
    make_study, worker = fleet
    study = make_study("unbegun", n_trials=2)
    study.enqueue_trial({"bits": 32})
    # As if their workers died in the sampler, before Optuna's heartbeat thread started.
    ghosts = [study.ask(), study.ask()]  # a queued trial popped, then a new one
    assert [g.number for g in ghosts] == [0, 1]
    time.sleep(3.5)  # the grace period
    process = worker("--target", "cpu", "--studies", "unbegun")
    try:
        output = process.communicate(timeout=120)[0]
    finally:
        process.kill()
    assert process.returncode == 0, output
    assert _states(study) == {"FAIL": 2, "COMPLETE": 2}
    failures = get_study("unbegun", study._storage).failures
    assert [f["number"] for f in failures] == [g.number for g in ghosts]
    assert all(f["retried_as"] is not None for f in failures)


def test_worker_survives_a_database_outage(fleet):
    make_study, worker = fleet
    study = make_study("outage", n_trials=2, epochs=40)
    proxy = PgProxy()
    url = study._storage._backend.url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    process = worker("--target", "cpu", "--studies", "outage", "--storage", url)
    _running_on(study, process.pid)
    proxy.down()  # until the worker meets it: on a loaded host, training may outlast any fixed span
    output, deadline = "", time.monotonic() + 300
    while "storage unreachable" not in output and time.monotonic() < deadline:
        output += process.stdout.readline()
    time.sleep(2)  # down a while longer: the worker retries, and waits
    proxy.up()
    output += process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    assert "storage unreachable" in output
    states = _states(study)
    assert states["COMPLETE"] == 2 and "RUNNING" not in states


def test_a_loop_that_waits_on_a_stale_trial_says_for_what_and_how_long(tmp_path, caplog):
    from automl.fleet.study_loop import run_study_loop
    from automl.storage.factory import open_artifact_store

    url = f"sqlite:///{tmp_path / 'w.db'}"
    settings = Settings(storage=url, artifacts_dir=tmp_path / "art", heartbeat_interval_s=1,
                        grace_period_s=2)  # fmt: skip
    storage = open_storage(url, settings)
    spec = parse_spec({"name": "w", "search_space": "digits-mlp", "n_trials": 1,
                       "trials_per_model": 1})  # fmt: skip
    study = create_study(spec, storage)
    trial = study.ask()  # its worker died: the only slot is held by a stale trial
    storage.record_heartbeat(trial._trial_id)
    with caplog.at_level("INFO", logger="automl"):
        result = run_study_loop("w", storage, artifact_store=open_artifact_store(settings),
                                settings=settings, poll_s=0.2)  # fmt: skip
    assert (result.reason, result.ran) == ("done", 1)  # the stale trial was retried here
    (said,) = [
        r.getMessage() for r in caplog.records if "waiting for its last trials" in r.getMessage()
    ]
    assert "failed and retried here once its heartbeat is 2 s old" in said
