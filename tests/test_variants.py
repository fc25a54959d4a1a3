from __future__ import annotations

import optuna

from automl.space import load_space
from automl.variants import VARIANT_OF, VariantSampler

MODEL = ("arch.width", "arch.depth", "pruning_ratio")


def _study(trials_per_model: int) -> optuna.Study:
    space = load_space("digits-mlp")
    sampler = VariantSampler(optuna.samplers.RandomSampler(seed=0), space, trials_per_model)
    return optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)


def _objective(trial: optuna.Trial) -> tuple[float, float]:
    candidate = load_space("digits-mlp").suggest(trial)
    width = candidate.arch.width
    return width / 1000, float(width)  # wider: more accurate and slower, so all are on the front


def test_a_front_model_gets_trials_per_model_deployments_then_a_new_model_is_drawn():
    study = _study(trials_per_model=3)
    study.optimize(_objective, n_trials=6)
    parents = [t.user_attrs.get(VARIANT_OF) for t in study.trials]
    assert parents == [None, 0, 0, None, 3, 3]
    for trial, parent in zip(study.trials, parents, strict=True):
        if parent is not None:
            parent_model = {k: study.trials[parent].params[k] for k in MODEL}
            assert {k: trial.params[k] for k in MODEL} == parent_model


def test_enqueued_trials_keep_their_params_and_a_dominated_model_gets_no_variants():
    study = _study(trials_per_model=2)
    study.enqueue_trial({"arch.width": 64, "batch_size": 1})
    study.enqueue_trial({"arch.width": 128, "batch_size": 1})

    def objective(trial):  # the wider model is slower and no more accurate: dominated
        candidate = load_space("digits-mlp").suggest(trial)
        return 0.9, float(candidate.arch.width)

    study.optimize(objective, n_trials=3)
    assert [t.user_attrs.get(VARIANT_OF) for t in study.trials] == [None, None, 0]
    assert study.trials[1].params["arch.width"] == 128


def test_one_trial_per_model_draws_every_model_anew():
    study = _study(trials_per_model=1)
    study.optimize(_objective, n_trials=4)
    assert all(VARIANT_OF not in t.user_attrs for t in study.trials)
