"""A trained model's study loop: its trials and its sampler's variants draw from the space
resolved for the model."""

from __future__ import annotations

import optuna
import pytest

from automl.fleet.study_loop import run_study_loop
from automl.search.spec import parse_spec
from automl.search.variants import VARIANT_OF
from automl.service.create import create_study

_SPACE = """name: mixed
params:
  method: {type: categorical, choices: [fp32, int8-mixed]}
  keep_fp32: {type: int, low: 1, high: 4, when: {method: [int8-mixed]}}
  batch_size: {type: fixed, value: 1}
"""


@pytest.mark.slow  # two trials
# The second trial is a variant of the baseline's model; without variants, TPE's draw (of
# int8-mixed at seed 3). The CNN has 3 layers (Conv, Conv, Gemm), the MLP 2 (Gemm, Gemm).
@pytest.mark.parametrize(
    ("model", "layers", "trials_per_model", "seed"), [("cnn", 3, 6, 0), ("mlp", 2, 1, 3)]
)
def test_no_trial_or_variant_keeps_every_layer_of_a_trained_model(
    env, tmp_path, exported_models, model, layers, trials_per_model, seed
):
    settings, storage, artifact_store = env
    (tmp_path / "space.yaml").write_text(_SPACE)
    spec = {
        "name": "mixed",
        "model": {"weights": str(exported_models[model])},
        "search_space": str(tmp_path / "space.yaml"),
        "n_trials": 2,
        "seed": seed,
        "trials_per_model": trials_per_model,
    }
    create_study(parse_spec(spec), storage)

    run_study_loop("mixed", storage, artifact_store=artifact_store, settings=settings)

    baseline, drawn = optuna.load_study(study_name="mixed", storage=storage).trials
    assert baseline.params == {"method": "fp32"} and drawn.state.name == "COMPLETE"
    assert (VARIANT_OF in drawn.user_attrs) == (trials_per_model > 1)
    # Of keep_fp32 1 to 4, those from the layer count on keep them all: the fp32 graph.
    assert drawn.params["method"] == "int8-mixed"
    assert drawn.params["keep_fp32"] < layers
