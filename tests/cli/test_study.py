"""``automl study ...`` through the real command: start, resume, signals, fronts, exports."""

from __future__ import annotations

import json
import shlex
import time

import numpy as np
import onnxruntime as ort
import optuna
from cli_runs import AUTOML, CliRun, count_state

from automl.inputs.data import load_dataset


def _values(trial: dict) -> tuple[float, float]:
    return trial["values"]["accuracy"], trial["values"]["latency_per_sample_ms"]


def test_study_end_to_end_through_the_cli(cli, tmp_path, zygote):
    out = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "3", "--name", "e2e",
        "--remeasure-front",
    )  # fmt: skip
    assert "Pareto front of e2e" in out.stdout
    assert "re-measured" in out.stdout
    for number in range(3):  # no terminal: one line per finished trial, Optuna's own quiet
        assert f"e2e: trial {number} val acc " in out.stdout, out.stdout
    assert "[I " not in out.stderr

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

    cli.env["AUTOML_ARTIFACTS_DIR"] = str(tmp_path / "elsewhere")  # not where the study ran
    out = cli("study", "export", "e2e", "--trial", str(best["number"]), "-o", "x.onnx", check=False)
    said = " ".join(out.stderr.split())
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"the model of trial {best['number']} of study 'e2e' (artifact " in said
    assert f"is not in '{tmp_path / 'elsewhere'}'" in said
    assert "Give --artifacts-dir (or set AUTOML_ARTIFACTS_DIR)" in said
    assert not (tmp_path / "elsewhere").exists()
    out = cli("study", "export", "e2e", "--best", "accuracy", "--budget", "latency_p99_ms <= 5",
              "-o", "y.onnx", check=False)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "AUTOML_ARTIFACTS_DIR" in out.stderr and not (tmp_path / "elsewhere").exists()
    flag = ("--artifacts-dir", str(tmp_path / "artifacts"))  # over the environment's
    cli("study", "export", "e2e", "--trial", str(best["number"]), "-o", "f.onnx", *flag)
    # The default layout, studies/automl.db beside studies/artifacts, read from another folder
    # by the storage's URL alone, as a user copies it
    (tmp_path / "artifacts").rename(tmp_path / "studies" / "artifacts")
    plain = {
        k: v for k, v in cli.env.items() if k not in ("AUTOML_STORAGE", "AUTOML_ARTIFACTS_DIR")
    }
    (tmp_path / "other").mkdir()
    args = ["study", "export", "e2e", "--trial", str(best["number"]), "-o", "b.onnx"]
    done = zygote.run(
        [*args, "--storage", cli.storage], cwd=tmp_path / "other", env=plain, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "other" / "b.onnx").is_file()


def test_reads_in_an_empty_folder_create_nothing(cli):
    for command in (
        ["export", "foo", "--trial", "0", "-o", "m.onnx"],
        ["report", "foo", "-o", "r.html"],
    ):
        out = cli("study", *command, check=False)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert not (cli.root / "studies").exists() and not (cli.root / "artifacts").exists()


def test_absent_target_is_refused_before_training(cli, tmp_path):
    started = time.monotonic()
    out = cli(
        "study", "start", "--target", "a100", "--space", "digits-gpu", "--n-trials", "2",
        "--no-remeasure-front", check=False,
    )  # fmt: skip
    assert out.returncode != 0
    assert "automl worker --target a100" in out.stderr
    assert time.monotonic() - started < 30
    assert not (tmp_path / "artifacts").exists()


def test_detach_creates_a_queued_study_for_remote_workers(cli):
    refused = cli("study", "start", "--target", "a100", "--name", "remote", "--detach", check=False)
    # The default space's 8 bits are int8-static or int8-dynamic, CPU recipes.
    assert refused.returncode == 2 and "'int8-static']" in refused.stderr
    assert "digits-gpu" in refused.stderr
    out = cli(
        "study", "start", "--target", "a100", "--space", "digits-gpu", "--name", "remote",
        "--detach",
    )  # fmt: skip
    assert "automl worker --target a100" in out.stdout
    info = json.loads(cli("study", "show", "remote", "--json").stdout)
    assert info["state"] == "queued" and info["counts"]["COMPLETE"] == 0
    stopped = " ".join(cli("study", "stop", "remote").stdout.split())
    assert json.loads(cli("study", "show", "remote", "--json").stdout)["state"] == "stopped"
    resume = stopped.split("Resume it with: ")[1]
    assert resume == "automl study start --name remote --detach"  # no a100 here
    cli(*shlex.split(resume)[1:])  # the command as printed queues it again
    assert json.loads(cli("study", "show", "remote", "--json").stdout)["state"] == "queued"
    trt = ("--space", "digits-trt", "--name", "remote-trt", "--detach")
    assert "automl worker --target a100" in cli("study", "start", "--target", "a100", *trt).stdout


def test_an_npz_dataset_anywhere_is_used_and_a_malformed_one_refused_up_front(cli, tmp_path):
    digits = load_dataset("digits", seed=0)
    elsewhere = tmp_path / "elsewhere"  # not under the API's data root, ./data
    elsewhere.mkdir()
    arrays = {"x_train": digits.x_train, "y_train": digits.y_train}
    np.savez(elsewhere / "mine.npz", **arrays, x_test=digits.x_test, y_test=digits.y_test)
    np.savez(elsewhere / "half.npz", **arrays)
    args = ["study", "start", "--space", "digits-mlp", "--n-trials", "1", "--no-remeasure-front"]
    args.append("--dataset")
    cli(*args, str(elsewhere / "mine.npz"), "--name", "mine")
    assert json.loads(cli("study", "show", "mine", "--json").stdout)["counts"]["COMPLETE"] == 1
    out = cli(*args, str(elsewhere / "half.npz"), "--name", "half", check=False)
    assert out.returncode == 2 and "x_test" in out.stderr
    assert "half" not in cli("study", "list", "--json").stdout


def test_default_names_tell_datasets_apart_and_a_taken_name_is_refused_first(cli, digits):
    arrays = {"x_train": digits.x_train[:300], "y_train": digits.y_train[:300]}
    np.savez(cli.root / "wine.npz", **arrays, x_test=digits.x_test, y_test=digits.y_test)
    # a spec file without a name, on two targets: each default name says its target once
    (cli.root / "gpu.yaml").write_text("search_space: digits-gpu\ndataset: wine.npz\n")
    cli("study", "start", "gpu.yaml", "--target", "cpu,a100", "--detach")
    names = ["digits-gpu-wine-a100", "digits-gpu-wine-cpu"]  # the dataset's stem, not digits'
    assert sorted(optuna.get_all_study_names(cli.storage)) == names
    taken = ("--name", "digits-gpu-wine-cpu", "--dataset", "gone.npz")  # a file that is not there
    done = cli("study", "start", "--space", "digits-gpu", *taken, check=False)
    assert done.returncode == 2 and "fields ['dataset'] differ" in done.stderr, done.stderr


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


def test_resume_after_kill_loses_no_completed_trial(cli, tmp_path, zygote):
    args = ["study", "start", "--space", "digits-mlp", "--n-trials", "5", "--name", "r"]
    args.append("--no-remeasure-front")
    run = CliRun([*AUTOML, *args], tmp_path, cli.env, zygote)  # forked: no imports to wait on
    deadline = time.monotonic() + 300
    while count_state(cli.storage, "COMPLETE") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    run.process.kill()
    run.process.wait(30)
    study = optuna.load_study(study_name="r", storage=cli.storage)
    before = {t.number for t in study.trials if t.state.name == "COMPLETE"}
    assert len(before) >= 2

    cli(*args)
    trials = optuna.load_study(study_name="r", storage=cli.storage).trials
    after = {t.number for t in trials if t.state.name == "COMPLETE"}
    assert before <= after and len(after) == 5
    assert not [t for t in trials if t.state.name == "RUNNING"]


def test_two_jobs_on_sqlite_complete_exactly_n(cli):
    out = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "4", "--name", "j", "--jobs", "2",
        "--no-remeasure-front",
    )  # fmt: skip
    assert "locked" not in out.stderr
    trials = optuna.load_study(study_name="j", storage=cli.storage).trials
    assert sum(t.state.name == "COMPLETE" for t in trials) == 4
    assert not [t for t in trials if t.state.name == "FAIL"]
    assert len({t.number for t in trials}) == len(trials)
    assert np.unique([str(t.params) for t in trials]).size > 1


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
        "--no-remeasure-front",
    )
    worker = f"automl worker --target a100 --storage {cli.storage} --studies m-a100"
    said = out.stdout.split("Pareto front")  # before the run, and again after it
    assert "Study m-a100 is queued (this host cannot measure a100)" in said[0]
    assert worker in said[0] and "Study m-a100 is still queued" in said[-1] and worker in said[-1]
    states = {s["name"]: s["state"] for s in json.loads(cli("study", "list", "--json").stdout)}
    assert states == {"m-cpu": "done", "m-a100": "queued"}
    shown = cli("study", "show", "m-a100").stdout
    assert "No worker is running it. A host with a100 runs it with:" in shown and worker in shown
    assert json.loads(cli("study", "show", "m-a100", "--json").stdout)["worker_command"] == worker
    assert json.loads(cli("study", "show", "m-cpu", "--json").stdout)["worker_command"] is None
    a100 = json.loads(cli("study", "show", "m-a100", "--json").stdout)["spec"]
    cpu = json.loads(cli("study", "show", "m-cpu", "--json").stdout)["spec"]
    assert {k: v for k, v in a100.items() if k not in ("name", "target")} == {
        k: v for k, v in cpu.items() if k not in ("name", "target")
    }
    cli("study", "start", "--space", "digits-gpu", "--n-trials", "2", "--name", "m2", "--seed", "1",
        "--no-remeasure-front")  # fmt: skip
    comparison = json.loads(cli("study", "compare", "m-cpu", "m2", "--json").stdout)
    assert comparison["studies"] == {"m-cpu": "cpu", "m2": "cpu"}
    fronts = {
        name: len(json.loads(cli("study", "pareto", name, "--json").stdout))
        for name in ("m-cpu", "m2")
    }
    on_front = [name for row in comparison["candidates"] for name in row["fronts"]]
    assert {name: on_front.count(name) for name in fronts} == fronts
    methods = {name: sum(knobs["method"].values()) for name, knobs in comparison["knobs"].items()}
    assert methods == fronts  # every front candidate counted once by its method


def test_a_target_that_refuses_the_space_leaves_no_study_of_the_other_targets(cli):
    """digits-mlp suggests 4-bit, which a100 cannot run: cpu comes first, and is not created."""
    for targets in ("cpu,a100", "a100,cpu"):
        out = cli("study", "start", "--space", "digits-mlp", "--target", targets, "--detach",
                  check=False)  # fmt: skip
        assert out.returncode == 2, out.stderr
        assert "a100" in out.stderr and "cannot run" in out.stderr
        assert json.loads(cli("study", "list", "--json").stdout) == []


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
    cli.env["AUTOML_KNOB_BOUNDS"] = '{"train.lr": [0, 1e31]}'  # allowed here, to fail trials
    args = ("study", "start", "--space", str(space), "--n-trials", "1", "--name", "f")
    out = cli(*args, check=False)
    assert out.returncode == 1, out.stderr
    assert "too many failed trials" in out.stdout and "--retry-failed" in out.stdout
    said = out.stdout + out.stderr  # each failure in a line: the loss, not a traceback
    assert "training diverged" in said and "Traceback" not in said
    space.write_text(body + "  train.lr: {type: fixed, value: 0.01}\n")
    again = cli(*args, check=False)
    assert again.returncode == 1 and count_state(cli.storage, "COMPLETE") == 0
    cli("study", "start", "--name", "f", "--retry-failed", "--no-remeasure-front")
    assert count_state(cli.storage, "COMPLETE") == 1


def test_objectives_and_constraints_from_the_command_line(cli):
    started = cli(
        "study", "start", "--space", "digits-mlp", "--n-trials", "1", "--name", "flags",
        "--objective", "accuracy", "--objective", "size_mb", "--constraint",
        "latency_p99_ms <= 10", "--constraint", "size_mb <= 0.0001", "--no-remeasure-front",
    )  # fmt: skip
    info = json.loads(cli("study", "show", "flags", "--json").stdout)
    assert [o["metric"] for o in info["spec"]["objectives"]] == ["accuracy", "size_mb"]
    assert [c["bound"] for c in info["spec"]["constraints"]] == [10, 0.0001]
    assert info["infeasible"] == {"size_mb <= 0.0001": 1}  # no model is that small
    shown = cli("study", "show", "flags").stdout
    assert "infeasible: 1 complete trial(s) break size_mb <= 0.0001" in " ".join(shown.split())
    # the empty front says why wherever it is shown, with the closest size reached
    [trial] = optuna.load_study(study_name="flags", storage=cli.storage).trials
    size = trial.user_attrs["size_mb"]
    why = f"size_mb <= 0.0001 (broken by 1; the closest of them reached {size:.4g})"
    pareto = cli("study", "pareto", "flags").stdout
    exported = cli("study", "export", "flags", "--best", "accuracy", "-o", "m.onnx", check=False)
    for shown in (started.stdout, pareto, exported.stderr):
        text = " ".join(shown.split())
        assert "no trial of study 'flags' meets its constraints" in text and why in text, text
    assert exported.returncode != 0 and size > 0.0001


def test_the_serving_space_searches_batching_with_the_model_under_poisson_load(cli):
    # The shipped space with a looser SLO than its own 10 ms, from the command line: the test
    # shares two cores, and a trial whose harness floor takes over 0.1 of the SLO fails.
    cli(
        "study", "start", "--space", "digits-serving", "--target", "cpu", "--slo-p99-ms", "200",
        "--n-trials", "2", "--no-remeasure-front",
    )  # fmt: skip
    info = json.loads(cli("study", "show", "digits-serving-cpu", "--json").stdout)
    # the space's own scenario, its SLO raised
    assert info["spec"]["serving"] == {
        "arrival": "poisson", "rate_rps": "max", "slo_p99_ms": 200.0, "duration_s": 0.5
    }  # fmt: skip
    assert [o["metric"] for o in info["spec"]["objectives"]] == ["accuracy", "max_rate_rps"]
    shown = cli("study", "show", "digits-serving-cpu").stdout
    assert "serving poisson arrivals at the max rate   SLO p99 <= 200 ms   load runs 0.5 s" in shown
    study = optuna.load_study(study_name="digits-serving-cpu", storage=cli.storage)
    for trial in study.trials:
        if "repeat_of" in trial.user_attrs:  # screened before its stages: nothing served
            continue
        served, candidate = trial.user_attrs["serving"], trial.user_attrs["candidate"]
        assert candidate["serving"]["max_batch"] == candidate["batch_size"]
        if trial.state.name == "PRUNED":  # screened: it could not beat a measured trial
            assert served["screened"] == trial.user_attrs["screened"]
            if "after one load run" in served["screened"]:  # at the rate it had to beat
                assert len(served["runs"]) == 1 and served["held_rate_to_beat"] is False
            elif "but no higher rate" in served["screened"]:  # a tie
                assert served["held_rate_to_beat"] and not served["beat_rate_to_beat"]
            else:  # by its isolated latency, before any load run
                assert served["rate_bound_rps"] > 0 and "runs" not in served
            continue
        runs = served["runs"]
        assert [r["offered_rps"] for r in runs] == sorted(r["offered_rps"] for r in runs)
        held = [r["offered_rps"] for r in runs if r["kept_up"] and r["p99_bound_ms"] <= 200]
        assert trial.user_attrs["max_rate_rps"] == max(held, default=0.0)
        assert 0 <= served["floor_share_of_slo"] < 1
    front = json.loads(cli("study", "pareto", "digits-serving-cpu", "--json").stdout)
    assert all("max_rate_rps" in row["metrics"] for row in front)
    assert "max req/s" in cli("study", "pareto", "digits-serving-cpu").stdout
    best = max(front, key=lambda row: row["metrics"]["max_rate_rps"])
    cli(
        "study", "export", "digits-serving-cpu", "--trial", str(best["number"]), "--format",
        "triton", "-o", "repo",
    )  # fmt: skip
    [entry] = (cli.root / "repo").iterdir()
    assert entry.name == "digits-serving-cpu"  # the study's: clients keep it across exports
    settings = study.trials[best["number"]].user_attrs["serving"]["settings"]
    config = (entry / "config.pbtxt").read_text()
    threads = study.trials[best["number"]].user_attrs["env"]["intra_op_threads"]
    per_instance = max(1, threads // settings["instances"])  # as the load runs split them
    assert f'"intra_op_thread_count" value: {{ string_value: "{per_instance}" }}' in config
    assert '"inter_op_thread_count" value: { string_value: "1" }' in config
    assert 'backend: "onnxruntime"' in config and "kind: KIND_CPU" in config
    assert f"max_batch_size: {settings['max_batch']}\n" in config
    delay_us = round(settings["max_queue_delay_ms"] * 1000)
    assert f"max_queue_delay_microseconds: {delay_us} }}" in config
    assert f"count: {settings['instances']}," in config
    assert "dims: [ 1, 8, 8 ]" in config and "dims: [ 10 ]" in config  # no batch axis
    assert ort.InferenceSession(str(entry / "1" / "model.onnx")).get_inputs()[0].name in config
    sidecar = json.loads((entry / "1" / "model.json").read_text())
    assert sidecar["serving"]["settings"] == settings and sidecar["serving"]["max_rate_rps"] > 0
    cli(
        "study", "export", "digits-serving-cpu", "--trial", str(best["number"]), "--format",
        "triton", "--model-name", "digits", "-o", "repo",
    )  # fmt: skip
    assert (cli.root / "repo" / "digits" / "config.pbtxt").read_text().startswith('name: "digits"')
    cli("study", "report", "digits-serving-cpu", "-o", "r/report.html")
    page = (cli.root / "r" / "report.html").read_text()
    assert "The front under load" in page and "SLO 200 ms" in page and "max req/s" in page


def test_a_serving_study_whose_harness_is_too_slow_for_its_slo_is_refused(cli):
    (cli.root / "tight.yaml").write_text(
        "search_space: digits-serving\nserving: {rate_rps: 2000, slo_p99_ms: 0.0001}\n"
    )
    done = cli("study", "start", "tight.yaml", check=False)
    assert done.returncode == 2
    assert "the load harness alone takes p99" in done.stderr and "0.0001 ms SLO" in done.stderr
    assert optuna.get_all_study_names(cli.storage) == []  # refused before any study exists


def test_the_load_options_are_refused_where_they_cannot_apply(cli):
    done = cli("study", "start", "--space", "digits-mlp", "--slo-p99-ms", "50", check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert "--slo-p99-ms: search space 'digits-mlp' serves nothing" in said
    assert "--space digits-serving" in said and "serving: {rate_rps: max" in said
    done = cli("study", "start", "--space", "digits-serving", "--rate", "fast", check=False)
    assert done.returncode == 2 and "--rate: takes a number, not the text 'fast'" in done.stderr
    assert not (cli.root / "studies").exists()  # refused before any storage is opened
