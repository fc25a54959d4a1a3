"""`automl study start --model --weights`: a trained model's study from the command line."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

TESTS = str(Path(__file__).resolve().parents[1])


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
    assert "Pareto front of trained_factories.digits_cnn-cpu" in done.stdout
    assert "baseline (unmodified" in done.stdout and "speedup" in done.stdout
    study = optuna.load_study(
        study_name="trained_factories.digits_cnn-cpu", storage=trained_cli.env["AUTOML_STORAGE"]
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


@pytest.fixture(scope="module")
def raw_pixels(tmp_path_factory):
    """The digits as uint8 pixels 0..255 in an .npz, and weights trained on them as given:
    ``{"data": path, "sequential": path, "deep_narrow": path}``. The deep, narrow stand-in's
    last layer is scaled 100×, so that its logits run in the hundreds, as a ResNet's may."""
    from sklearn.datasets import load_digits
    from trained_factories import deep_narrow, sequential

    from automl.candidate import TrainConfig
    from automl.inputs.data import load_dataset
    from automl.pipeline.train import train

    folder = tmp_path_factory.mktemp("raw")
    bunch = load_digits()
    x = (bunch.images * 16).clip(0, 255).astype(np.uint8)[:, None]
    paths = {"data": folder / "raw.npz"}
    np.savez(paths["data"], x_train=x[:1400], y_train=bunch.target[:1400],
             x_test=x[1400:], y_test=bunch.target[1400:])  # fmt: skip
    data = load_dataset(str(paths["data"]), standardize="none")
    for factory, lr in ((sequential, 3e-3), (deep_narrow, 1e-2)):
        model = train(factory(), data, TrainConfig(epochs=3, lr=lr), seed=0).model
        if factory is deep_narrow:
            with torch.no_grad():
                model[-1].weight.mul_(100)
                model[-1].bias.mul_(100)
        paths[factory.__name__] = folder / f"{factory.__name__}.pt"
        torch.save(model.state_dict(), paths[factory.__name__])
    return paths


@pytest.mark.slow
@pytest.mark.xdist_group("raw_pixels")  # one process trains raw_pixels' models, once
@pytest.mark.parametrize(("factory", "layer"), [("sequential", "6"), ("deep_narrow", "38")])
def test_an_unnamed_sequential_and_a_deep_narrow_model_are_optimized(
    trained_cli, raw_pixels, factory, layer
):
    trained_cli(
        "study", "start", "--model", f"trained_factories:{factory}", "--weights",
        str(raw_pixels[factory]), "--dataset", str(raw_pixels["data"]), "--n-trials", "2",
        "--name", factory, "--no-remeasure-front",
    )  # fmt: skip
    study = optuna.load_study(study_name=factory, storage=trained_cli.storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert {t.user_attrs["output_layer"] for t in study.trials} == {layer}


def digits_cnn_untrained():
    from trained_factories import digits_cnn

    return digits_cnn()


@pytest.mark.xdist_group("raw_pixels")
def test_a_baseline_at_chance_exits_non_zero_with_the_preprocessing_hint(trained_cli, raw_pixels):
    torch.save(digits_cnn_untrained().state_dict(), trained_cli.root / "random.pt")
    done = trained_cli(
        "study", "start", "--model", "trained_factories:digits_cnn", "--weights", "random.pt",
        "--dataset", str(raw_pixels["data"]), "--n-trials", "2", check=False,
    )  # fmt: skip
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2, said
    assert "not clearly above chance for 10 classes" in said, said
    assert (
        "automl feeds a trained model its inputs as given: here uint8 values from 0 to 255" in said
    )
    assert _names(trained_cli) == []


def test_a_resume_on_changed_weights_is_refused(trained_cli):
    args = ("study", "start", "--model", "trained_factories:digits_cnn", "--weights", "w.pt",
            "--name", "w", "--n-trials", "1", "--no-remeasure-front")  # fmt: skip
    trained_cli(*args)
    state = torch.load(trained_cli.root / "w.pt", weights_only=True)
    torch.save({k: v * 1.01 if v.is_floating_point() else v for k, v in state.items()},
               trained_cli.root / "w.pt")  # fmt: skip
    done = trained_cli(*args[:-3], "--n-trials", "2", "--no-remeasure-front", check=False)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0 and "has changed since the study began" in said, said
    study = optuna.load_study(study_name="w", storage=trained_cli.storage)
    assert len(study.trials) == 1


@pytest.fixture
def onnx_cli(trained_cli):
    """The trained digits CNN exported to model.onnx at a fixed batch of 1, as teams hand
    graphs over; and one whose Reshape fixes the batch, as fixed.onnx."""
    from trained_factories import digits_cnn

    model = digits_cnn()
    model.load_state_dict(torch.load(trained_cli.root / "w.pt", weights_only=True))
    one = (torch.zeros(1, 1, 8, 8),)
    torch.onnx.export(model.eval(), one, str(trained_cli.root / "model.onnx"), dynamo=False)
    flat = torch.nn.Sequential(torch.nn.Flatten(0), torch.nn.Linear(64, 10)).eval()
    torch.onnx.export(flat, one, str(trained_cli.root / "fixed.onnx"), dynamo=False)
    return trained_cli


@pytest.mark.slow
def test_an_onnx_model_is_searched_over_method_batch_and_graph_optimization(onnx_cli):
    onnx_cli("study", "start", "--model", "model.onnx", "--n-trials", "3", "--no-remeasure-front")
    study = optuna.load_study(study_name="model-cpu", storage=onnx_cli.storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    assert study.trials[0].user_attrs["baseline"] and study.trials[0].user_attrs["accuracy"] > 0.9
    assert set(study.trials[1].params) == {"method", "batch_size", "graph_optimization"}
    assert (
        study.trials[1].user_attrs["env"]["graph_optimization"]
        == (study.trials[1].params["graph_optimization"])
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "model.onnx", "--space", "trained-model"],
         "an ONNX model has no torch weights, so it is neither pruned nor fine-tuned"),
        (["--model", "model.onnx", "--weights", "w.pt"], "it comes without --weights"),
        (["--model", "fixed.onnx"], "does not open or run in ONNX Runtime on the data (samples "
                                    "of shape (1, 8, 8)) at batches 1 and 4"),
    ],
)  # fmt: skip
def test_an_onnx_model_that_cannot_be_searched_is_refused(onnx_cli, args, message):
    done = onnx_cli("study", "start", *args, "--n-trials", "2", check=False)
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and message in said, said
    assert _names(onnx_cli) == []
