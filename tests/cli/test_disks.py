"""Disks that trials cannot write to: a read-only artifacts folder is refused before anything
runs, and a full disk stops a study, or a worker of several, at its first failed trial with no
partial file left."""

from __future__ import annotations

import json

import optuna
from disks import FILLER, fill, tmpfs

from automl.trials.objective import DISK_FULL

_READ_ONLY = (
    "cannot be written: Read-only file system; give a writable --artifacts-dir (or "
    "AUTOML_ARTIFACTS_DIR)"
)


def test_a_read_only_artifacts_folder_is_refused_before_a_study_is_created(cli):
    folder = cli.root / "artifacts"
    with tmpfs(folder, size_kb=64, read_only=True):  # root writes through permission bits
        out = cli("study", "start", "--space", "digits-mlp", "--n-trials", "2", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert " ".join(out.stderr.split()) == f"error: artifacts folder '{folder}' {_READ_ONLY}"
    assert json.loads(cli("study", "list", "--json").stdout) == []  # none left queued 0/2


def test_a_worker_refuses_a_read_only_artifacts_folder_before_it_takes_a_trial(cli):
    cli("study", "start", "--space", "digits-mlp", "--n-trials", "1", "--detach")
    folder = cli.root / "artifacts"
    with tmpfs(folder, size_kb=64, read_only=True):
        out = cli("worker", check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert " ".join(out.stderr.split()) == f"error: artifacts folder '{folder}' {_READ_ONLY}"
    counts = json.loads(cli("study", "show", "digits-mlp-cpu", "--json").stdout)["counts"]
    assert counts.get("RUNNING", 0) == counts.get("FAIL", 0) == 0  # no trial was taken


_WIDE = """name: wide
params:
  arch.family: {type: fixed, value: mlp}
  arch.width: {type: fixed, value: 256}
  arch.depth: {type: fixed, value: 2}
  batch_size: {type: fixed, value: 1}
  train.epochs: {type: fixed, value: 1}
"""


def test_a_full_disk_stops_the_study_at_its_first_trial_and_leaves_no_partial_file(cli):
    (cli.root / "wide.yaml").write_text(_WIDE)  # its model takes about 300 KB
    with tmpfs(cli.root / "artifacts", size_kb=512) as folder:
        (folder / "cache").mkdir()  # made by an earlier study
        fill(folder, leave_kb=64)  # room for the start's check, not for a model
        out = cli("study", "start", "--space", "wide.yaml", "--n-trials", "4", "--name", "full",
                  check=False)  # fmt: skip
        files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
                 if not p.is_dir()}  # fmt: skip
    said = out.stdout + out.stderr
    assert out.returncode == 3 and "Traceback" not in said, said
    assert [f for f in files if "/" not in f] == [FILLER]  # no model, whole or partial
    cached = [f for f in files if f.startswith("cache/")]
    assert all(f.endswith(".json") for f in cached)  # no temporary file, no partial .onnx
    assert all(json.loads(files[f]) for f in cached)  # the small entries that fitted are whole
    trials = optuna.load_study(study_name="full", storage=cli.storage).trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.FAIL]
    reason = trials[0].user_attrs["fail_reason"]
    assert reason == f"DiskFull: {DISK_FULL}"
    assert out.stderr.splitlines()[-1] == f"error: {DISK_FULL}"  # said once, in one line


def test_a_full_disk_stops_a_worker_at_its_first_trial_and_no_other_study_loses_one(cli):
    (cli.root / "wide.yaml").write_text(_WIDE)
    for name in ("first", "second"):  # oldest first: the worker takes "first"
        cli("study", "start", "--space", "wide.yaml", "--n-trials", "2", "--name", name,
            "--detach")  # fmt: skip
    with tmpfs(cli.root / "artifacts", size_kb=512) as folder:
        fill(folder, leave_kb=64)  # room for the worker's check, not for a model
        out = cli("worker", check=False)
    said = out.stdout + out.stderr
    assert out.returncode == 3 and "Traceback" not in said, said
    assert out.stderr.splitlines()[-1] == f"error: {DISK_FULL}"
    first = optuna.load_study(study_name="first", storage=cli.storage).trials
    assert [t.state for t in first] == [optuna.trial.TrialState.FAIL]
    assert first[0].user_attrs["fail_reason"] == f"DiskFull: {DISK_FULL}"
    assert optuna.load_study(study_name="second", storage=cli.storage).trials == []
