"""Samplers selectable in a study spec."""

from __future__ import annotations

import optuna

SAMPLERS = ("default", "tpe", "nsga2", "random", "gp")


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    """Build the sampler a spec names; constraints come from ``trial.set_constraint``.

    Args:
        name: ``default`` (Optuna's multi-objective default, TPE), ``tpe`` (multivariate,
            grouped TPE for conditional spaces), ``nsga2``, ``random`` or ``gp``.
        seed: Sampler seed; each worker process of a study should get its own.
    """
    if name == "default":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r}; choose one of {list(SAMPLERS)}")
