"""Shared fixtures and helpers: the real digits dataset, and studies run by the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from optuna.artifacts import FileSystemArtifactStore

from automl.data import Dataset, load_dataset
from automl.settings import Settings
from automl.spec import parse_spec
from automl.storage import open_storage
from automl.studies import create_study


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_dataset("digits", seed=0)


def run_cli_study(root: Path, spec: dict, enqueued: list[dict]) -> dict:
    """Create the study in ``root``, enqueue ``enqueued`` params, then run the real CLI on it.

    Returns:
        ``root``, ``env`` (for further CLI calls), ``storage``, ``store`` and ``study``.
    """
    env = {
        **os.environ,
        "AUTOML_STORAGE": f"sqlite:///{root / 'automl.db'}",
        "AUTOML_ARTIFACTS_DIR": str(root / "artifacts"),
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    storage = open_storage(env["AUTOML_STORAGE"], Settings())
    study = create_study(parse_spec(spec), storage)
    for params in enqueued:
        study.enqueue_trial(params)
    automl = Path(sys.executable).with_name("automl")
    command = [automl, "study", "start", "spec.yaml"]  # runs the enqueued trials first
    subprocess.run(command, cwd=root, env=env, check=True, capture_output=True, timeout=300)
    return {
        "root": root,
        "env": env,
        "storage": storage,
        "store": FileSystemArtifactStore(env["AUTOML_ARTIFACTS_DIR"]),
        "study": study,
    }
