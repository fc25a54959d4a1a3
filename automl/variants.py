"""Variants: more deployments of a model on the front, at no training cost.

Training dominates a trial, and bit-width, int8 mode and serving batch do not change the
weights. :class:`VariantSampler` wraps the study's sampler: when a trial starts, it may become a
variant of a model on the front, with that model's params fixed (as Optuna's
``PartialFixedSampler`` does) and the deployment knobs left to the wrapped sampler, minus the
deployments that model already has. The stage cache then skips its training and fine-tuning.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from automl.space import SearchSpace

logger = logging.getLogger("automl.variants")
VARIANT_OF = "variant_of"
# Draws from the wrapped sampler before a variant takes a random untried value instead.
_DRAWS = 8


@dataclass(frozen=True)
class _Variant:
    """The params a variant takes from its parent, and the deployments its model lacks."""

    fixed: dict[str, Any]
    untried: list[dict[str, Any]] | None  # None: the space's deployments cannot be listed

    def allowed(self, name: str, params: dict[str, Any]) -> list[Any] | None:
        """Values of knob ``name`` that leave an untried deployment, given ``params`` so far."""
        if self.untried is None:
            return None
        values = []
        for deployment in self.untried:
            agrees = all(params[k] == v for k, v in deployment.items() if k in params)
            if agrees and name in deployment and deployment[name] not in values:
                values.append(deployment[name])
        return values


class VariantSampler(optuna.samplers.BaseSampler):
    """A sampler whose new trials may redeploy a model on the front.

    Variants start once ``startup_trials`` trials are complete: a young front says little, and
    TPE samples its first (``n_startup_trials``) trials at random anyway. The parent is then the
    newest complete trial that is not a variant itself, whose model is on the front (no complete
    trial dominates it or one of its variants), and that has fewer than ``trials_per_model - 1``
    variants and a deployment it has not tried. A variant's knobs are drawn from the wrapped
    sampler's independent sampling, redrawn when the value would repeat a deployment of the
    model. Enqueued and retried trials keep their own params. Nothing is queued: two workers
    picking the same parent at once give it one variant more.
    """

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        space: SearchSpace,
        trials_per_model: int,
        startup_trials: int,
    ) -> None:
        self._base = base
        self._startup = startup_trials
        self._space = space
        self._per_model = trials_per_model
        self._variants: dict[int, _Variant] = {}

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)
        # Enqueued trials and retries (which carry their params) keep what they have.
        if "fixed_params" in trial.system_attrs or trial.params or VARIANT_OF in trial.user_attrs:
            return
        try:
            chosen = self._parent(study)
        except Exception:  # a variant saves training; failing to find one must not stop a trial
            logger.exception("trial %d: no variant chosen", trial.number)
            return
        if chosen is not None:
            parent, variant = chosen
            self._variants[trial._trial_id] = variant
            study._storage.set_trial_user_attr(trial._trial_id, VARIANT_OF, parent.number)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        # Variants sample independently: each value can then be checked against the untried
        # deployments, and a stateful sampler (GP) keeps one relative search space.
        if trial._trial_id in self._variants:
            return {}
        return self._base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self._base.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        variant = self._variants.get(trial._trial_id)
        if variant is None:
            return self._base.sample_independent(study, trial, param_name, param_distribution)
        if param_name in variant.fixed:
            return variant.fixed[param_name]
        allowed = variant.allowed(param_name, trial.params)
        for _ in range(_DRAWS):
            value = self._base.sample_independent(study, trial, param_name, param_distribution)
            if not allowed or value in allowed:
                return value
        return random.Random(trial.number).choice(allowed)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._variants.pop(trial._trial_id, None)
        self._base.after_trial(study, trial, state, values)

    def _parent(self, study: optuna.Study) -> tuple[FrozenTrial, _Variant] | None:
        trials = study.get_trials(deepcopy=False)
        variants = Counter(t.user_attrs.get(VARIANT_OF) for t in trials)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        if len(complete) < self._startup:
            return None
        signs = [1 if d == StudyDirection.MINIMIZE else -1 for d in study.directions]
        front = _front(complete, signs)
        # Models with a trial on the front, by their parent's number.
        on_front = {t.user_attrs.get(VARIANT_OF, t.number) for t in complete if t.number in front}
        for trial in reversed(complete):
            if VARIANT_OF in trial.user_attrs or variants[trial.number] >= self._per_model - 1:
                continue
            if trial.number in on_front:
                variant = self._variant_of(trial, trials)
                if variant.untried != []:
                    return trial, variant
        return None

    def _variant_of(self, parent: FrozenTrial, trials: list[FrozenTrial]) -> _Variant:
        fixed = self._space.model_params(parent.params)
        deployments = self._space.deployments(fixed)
        if deployments is None:
            return _Variant(fixed, None)
        model = [t for t in trials if parent.number in (t.number, t.user_attrs.get(VARIANT_OF))]
        tried = [{k: v for k, v in t.params.items() if k not in fixed} for t in model]
        return _Variant(fixed, [d for d in deployments if d not in tried])


def _front(trials: list[FrozenTrial], signs: list[int]) -> set[int]:
    """Numbers of the trials that no other trial dominates (all objectives minimised by sign)."""
    if not trials:
        return set()
    values = np.array([t.values for t in trials]) * np.array(signs)
    no_worse = (values[:, None, :] <= values[None, :, :]).all(axis=2)  # [j, i]: j ≤ i everywhere
    better = (values[:, None, :] < values[None, :, :]).any(axis=2)
    dominated = (no_worse & better).any(axis=0)
    return {t.number for t, d in zip(trials, dominated, strict=True) if not d}
