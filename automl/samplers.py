"""Samplers selectable in a study spec."""

from __future__ import annotations

import math
import warnings

import optuna

SAMPLERS = ("default", "optuna", "tpe", "nsga2", "random", "gp")


def wide_gamma(n_finished: int) -> int:
    """Size of TPE's "good" group: a quarter of the trials (Optuna's MO default is a tenth)."""
    return min(math.ceil(0.25 * n_finished), 25)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """Build the sampler a spec names; constraints come from ``trial.set_constraint``.

    Args:
        name: ``default``: multivariate, grouped TPE (conditional spaces) with a wider "good"
            group, measured in ``bench/search.py`` to beat Optuna's own default here;
            ``optuna``: Optuna's multi-objective default (TPE); ``tpe``: multivariate, grouped
            TPE with Optuna's group size; ``nsga2``; ``random``; ``gp``.
        seed: Sampler seed; each worker process of a study should get its own.
    """
    if name == "default":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # gamma: deprecated, kept until v6
            return optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, gamma=wide_gamma
            )
    if name == "optuna":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(f"unknown sampler {name!r}; choose one of {list(SAMPLERS)}")
