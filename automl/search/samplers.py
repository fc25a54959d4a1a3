"""Samplers selectable in a study spec."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import optuna

from automl.records import REPEAT_OF

if TYPE_CHECKING:
    from collections.abc import Container, Sequence

    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial, TrialState

    from automl.search.objectives import Objective

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


class ScaledValuesSampler(optuna.samplers.BaseSampler):
    """Wrap a sampler so that it sees each objective on the scale its spec asks for.

    Optuna stores the raw metrics (milliseconds, not log10 of them), so that every view of the
    study, the dashboard and plain ``optuna.load_study`` included, shows what was measured. The
    wrapped sampler reads the trials through a view whose values are scaled per objective (see
    :meth:`automl.search.objectives.Objective.scaled`), e.g. log10 of a latency spanning orders of
    magnitude. Finished trials never change, so each is scaled once.
    """

    def __init__(self, base: optuna.samplers.BaseSampler, objectives: Sequence[Objective]) -> None:
        """Wrap ``base``; ``objectives`` are the spec's, in the study's order."""
        self._base = base
        self._objectives = tuple(objectives)
        self._scaled: dict[int, FrozenTrial] = {}  # trial id → its scaled copy

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._base.infer_relative_search_space(self._view(study), trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._base.sample_relative(self._view(study), trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._base.sample_independent(
            self._view(study), trial, param_name, param_distribution
        )

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(self._view(study), trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        scaled = None if values is None else self.scale(values)
        self._base.after_trial(self._view(study), trial, state, scaled)

    def scale(self, values: Sequence[float]) -> list[float]:
        """The objective ``values`` of a trial as the wrapped sampler sees them."""
        return [o.scaled(v) for o, v in zip(self._objectives, values, strict=True)]

    def scaled_trials(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        """``trials`` with their values scaled; trials without values are passed as they are,
        but for repeats of a measured deployment (see :mod:`automl.trials.screen`), which are
        left out: they measured nothing, and as PRUNED trials TPE would count them among its
        best once they outnumber the COMPLETE ones, and propose them again."""
        return [
            self._scaled_trial(t) if t.values is not None else t
            for t in trials
            if REPEAT_OF not in t.user_attrs
        ]

    def _scaled_trial(self, trial: FrozenTrial) -> FrozenTrial:
        scaled = self._scaled.get(trial._trial_id)
        if scaled is None:
            scaled = copy.copy(trial)
            scaled.values = self.scale(trial.values)
            self._scaled[trial._trial_id] = scaled
        return scaled

    def _view(self, study: optuna.Study) -> _ScaledStudy:
        return _ScaledStudy(study, self)


class _ScaledStudy:
    """A study as a :class:`ScaledValuesSampler`'s wrapped sampler reads it."""

    def __init__(self, study: optuna.Study, sampler: ScaledValuesSampler) -> None:
        self._study = study
        self._sampler = sampler

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None):
        """Like :meth:`optuna.Study.get_trials`, with scaled values (never deep-copied)."""
        return self._sampler.scaled_trials(self._study.get_trials(deepcopy=False, states=states))

    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        trials = self._study._get_trials(deepcopy=False, states=states, use_cache=use_cache)
        return self._sampler.scaled_trials(trials)

    @property
    def trials(self) -> list[FrozenTrial]:
        """Every trial, with scaled values."""
        return self.get_trials()
