"""A Hugging Face model, built from a config (no hub download), optimized end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import automl
from automl.candidate import TrainConfig
from automl.inputs import synthetic
from automl.inputs.data import load_dataset
from automl.models import LogitsOf
from automl.pipeline.train import train

# Deployment knobs of a model whose attention pruning cannot shrink (its head size is config).
SPACE = """
name: hf-deploy
params:
  pruning_ratio: {type: categorical, choices: [0.0, 0.25]}
  finetune_epochs: {type: fixed, value: 1}
  method: {type: categorical, choices: [fp32, int8-dynamic]}
  batch_size: {type: categorical, choices: [1, 8]}
"""


@pytest.mark.slow
def test_a_transformers_classifier_is_optimized_end_to_end(tmp_path):
    from hf_factories import LENGTH, VOCAB_SIZE, tiny_bert

    data_path = tmp_path / "tokens.npz"
    np.savez(data_path, **synthetic.tokens(n_train=600, n_test=200, length=LENGTH,
                                           vocab_size=VOCAB_SIZE))  # fmt: skip
    model = LogitsOf(tiny_bert(), "logits")  # what automl builds of `output: logits`
    train(model, load_dataset(str(data_path)), TrainConfig(epochs=6, lr=3e-3), seed=0)
    torch.save(model.model.state_dict(), tmp_path / "bert.pt")
    (tmp_path / "space.yaml").write_text(SPACE)
    result = automl.optimize(
        model={"factory": "hf_factories:tiny_bert", "weights": str(tmp_path / "bert.pt"),
               "output": "logits"},
        dataset=str(data_path), search_space=str(tmp_path / "space.yaml"), n_trials=5,
        storage=f"sqlite:///{tmp_path}/s.db", artifacts_dir=tmp_path / "art", progress=False,
        remeasure=False, sampler="random",
    )  # fmt: skip
    trials = result.study.trials
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert trials[0].user_attrs["baseline"] and trials[0].user_attrs["accuracy"] > 0.8
    assert len(done) >= 3 and {t.user_attrs["output_layer"] for t in done} == {"classifier"}
    for trial in done:
        assert trial.user_attrs["speedup"] > 0 and abs(trial.user_attrs["accuracy_drop"]) < 0.2
    assert any(t.params["method"] == "int8-dynamic" for t in done)
    for failed in (t for t in trials if t.state.name == "FAIL"):  # pruning the attention
        assert "no longer runs after pruning" in failed.user_attrs["fail_reason"]
