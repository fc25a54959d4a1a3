"""`automl study start --model --weights`: a trained model's study from the command line."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest
import torch

TESTS = str(Path(__file__).resolve().parent)


@pytest.fixture
def trained_cli(cli, digits_cnn_weights):
    """The CLI with the test factories importable, and trained weights saved as w.pt."""
    cli.env["PYTHONPATH"] = TESTS
    shutil.copyfile(digits_cnn_weights, cli.root / "w.pt")
    return cli


def _names(cli) -> list[str]:
    if not (cli.root / "studies" / "automl.db").exists():
        return []  # refused before the storage was opened
    return optuna.get_all_study_names(cli.env["AUTOML_STORAGE"])


@pytest.mark.slow
def test_a_trained_models_study_shows_its_baseline_in_the_front(trained_cli):
    done = trained_cli(
        "study", "start", "--model", "trained_factories:digits_cnn", "--weights", "w.pt",
        "--n-trials", "3", "--no-remeasure-front",
    )  # fmt: skip
    assert "Pareto front of trained-model-cpu" in done.stdout
    assert "baseline (unmodified" in done.stdout and "speedup" in done.stdout
    study = optuna.load_study(
        study_name="trained-model-cpu", storage=trained_cli.env["AUTOML_STORAGE"]
    )
    assert study.trials[0].user_attrs["baseline"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "trained_factories:digits_cnn"], "--model and --weights come together"),
        (["--model", "trained_factories:narrower_cnn", "--weights", "w.pt"], "do not fit"),
        (["--model", "trained_factories:digits_cnn", "--weights", "none.pt"], "does not exist"),
        (
            [
                "--model",
                "trained_factories:digits_cnn",
                "--weights",
                "w.pt",
                "--space",
                "digits-cnn",
            ],
            "a trained model's architecture is fixed",
        ),
    ],
)
def test_a_bad_trained_model_exits_non_zero_with_no_study(trained_cli, args, message):
    done = trained_cli("study", "start", *args, "--n-trials", "2", check=False)
    assert done.returncode != 0
    assert message in " ".join((done.stdout + done.stderr).split())
    assert _names(trained_cli) == []
