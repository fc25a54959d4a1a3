from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from automl.search.front_gain import OPTIMISM, REUSES, KernelCache, predicted_gains
from automl.search.space import load_space
from automl.search.variants import MIN_GAIN

SPACE = load_space("digits-mixed")
SIGNS = [-1, 1]  # maximise accuracy, minimise log latency


def _latency(family: str, width: int, batch: int) -> float:
    """Per-sample log latency: batching hides a small MLP's call overhead, not a CNN's compute."""
    if family == "mlp":
        return math.log10(width / 16 + 100 / batch)
    return math.log10(width * 10)


def _study(trials: list[tuple[str, int, int]]) -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize"])
    for family, width, batch in trials:
        study.enqueue_trial(
            {"arch.family": family, "arch.width": width, "arch.depth": 1, "arch.kernel_size": 3}
            | {"pruning_ratio": 0.0, "bits": 32, "batch_size": batch}
        )

    def objective(trial):
        candidate = SPACE.suggest(trial)
        family, width = candidate.arch.family, candidate.arch.width
        accuracy = 0.5 + width / 200 if family == "mlp" else 0.9 + width / 1000
        return accuracy, _latency(family, width, candidate.batch_size)

    study.optimize(objective, n_trials=len(trials))
    return study


def _gains(
    study: optuna.Study, parent: int, batches: list[int], optimism: float = OPTIMISM
) -> list[float]:
    trial = study.trials[parent]
    candidates = [(trial, {**trial.params, "batch_size": b}) for b in batches]
    return predicted_gains(SPACE, study.trials, SIGNS, candidates, optimism=optimism)[0]


@pytest.fixture(scope="module")
def study() -> optuna.Study:
    measured = [("mlp", w, b) for w in (8, 16, 32) for b in (1, 8, 32, 128)]
    measured += [("cnn", w, b) for w in (16, 32, 48) for b in (1, 8, 32)]
    return _study([*measured, ("mlp", 48, 1), ("cnn", 40, 1)])


def test_a_deployment_that_cuts_latency_is_predicted_to_extend_the_front(study):
    mlp = len(study.trials) - 2  # the most accurate MLP, measured at batch 1 only
    gain_at_128, gain_at_1 = _gains(study, mlp, [128, 1])
    assert gain_at_128 > 0.05
    assert gain_at_1 == pytest.approx(0.0, abs=1e-9)  # the parent's own deployment adds nothing


def test_the_effect_of_a_deployment_depends_on_the_model(study):
    """Batching helped every MLP and no CNN; a pooled linear trend would credit the CNN too."""
    cnn = len(study.trials) - 1
    assert _gains(study, cnn, [128], optimism=0.0)[0] < MIN_GAIN


def test_optimism_credits_a_deployment_by_how_unsure_its_effect_is(study):
    """No CNN was measured at batch 128: its effect there is less certain than at batch 8."""
    cnn = len(study.trials) - 1
    plain, optimistic = (np.array(_gains(study, cnn, [8, 128], k)) for k in (0.0, OPTIMISM))
    assert (optimistic >= plain).all()
    assert optimistic[1] - plain[1] > optimistic[0] - plain[0]


def test_a_kernel_cache_reuses_hyperparameters_then_optimises_them_again(study):
    mlp = len(study.trials) - 2
    trial = study.trials[mlp]
    candidates = [(trial, {**trial.params, "batch_size": b}) for b in (128, 8)]
    cache = KernelCache()
    fresh = predicted_gains(SPACE, study.trials, SIGNS, candidates, cache)[0]
    optimised = np.concatenate([k.theta for k in cache.kernels])
    for reuses in range(1, REUSES + 1):
        again = predicted_gains(SPACE, study.trials, SIGNS, candidates, cache)[0]
        assert cache.reused == reuses
        theta = np.concatenate([k.theta for k in cache.kernels])
        assert np.array_equal(theta, optimised)  # not optimised again
        assert again == pytest.approx(fresh)  # the same trials: the same model
    predicted_gains(SPACE, study.trials[:-1], SIGNS, candidates, cache)
    assert cache.reused == 0  # optimised anew, on other trials
    assert not np.array_equal(np.concatenate([k.theta for k in cache.kernels]), optimised)
