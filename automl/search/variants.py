"""Variants: more deployments of a trained model, at no training cost.

Training dominates a trial, and bit-width, int8 mode and serving batch do not change the
weights. :class:`VariantSampler` wraps the study's sampler: when a trial starts, it may become a
variant of a model run before: that model's params with the deployment predicted to add the
most hypervolume to the front (see :mod:`automl.search.front_gain`), fixed as Optuna's
``PartialFixedSampler`` does. The stage cache then skips its training and fine-tuning.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import TrialState

from automl.records import violated
from automl.search.front_gain import KernelCache, predicted_gains

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from automl.search.space import SearchSpace

logger = logging.getLogger("automl.search.variants")
VARIANT_OF = "variant_of"
# Least share of the front's hypervolume a variant must be predicted to add; below it, the
# prediction is fitting noise.
MIN_GAIN = 1e-3
CLAIM = "automl:variant_claim"  # system attr: the params a starting variant will take
# Random models whose mean predicted gain a variant must beat: a trial spent on a variant is
# one not spent on a new model.
NEW_MODEL_DRAWS = 32
MAX_CLAIMS = 3  # variants a trial tries to claim before it draws a new model instead
STARTUP_REDEPLOYS = 2  # random variants of each new model during the startup


class VariantSampler(optuna.samplers.BaseSampler):
    """A sampler whose new trials may redeploy a model run before.

    Until ``startup_trials`` trials are complete, the front says little and TPE samples at random
    anyway (its ``n_startup_trials``), so each new model, once complete, is redeployed
    ``STARTUP_REDEPLOYS`` times at random deployments it has not tried: as many deployments are
    seen as with new models only, for a third of the training. After that, a trial becomes the
    variant predicted to add the most hypervolume to the front, optimistically (see
    :mod:`automl.search.front_gain`), among the untried deployments of every model with fewer
    than ``trials_per_model - 1`` variants (a model dominated where it was measured may still
    extend the front at another batch size). The front is that of the feasible trials, and a
    model that breaks a constraint no deployment repairs (on accuracy) is never redeployed: in
    a recorded trained-model study, 2 of 15 variants went to a model whose accuracy had dropped
    5.6 points against a budget of 1.

    A variant must be predicted to add more than a new model would: the mean gain predicted,
    just as optimistically, for ``NEW_MODEL_DRAWS`` models drawn at random (and at least
    ``MIN_GAIN``); otherwise the wrapped sampler draws a new model. Without that bar, 13 to 15 of
    the 20 trials of a CNN's trained-model studies (``bench.optimize``) were variants: 5 to 7
    models were trained, most lightly pruned, and no deployment of theirs reached the speedups
    that pruning did.

    Spaces whose deployments cannot be listed (a float knob, or too many) get no variants.
    Enqueued and retried trials keep their own params. Nothing is queued; a variant is claimed
    in its trial's system attrs, so that workers choosing at once do not run it twice.
    """

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        space: SearchSpace,
        trials_per_model: int,
        startup_trials: int,
        seed: int = 0,
        stuck: Sequence[int] = (),
    ) -> None:
        """Wrap ``base``; ``seed`` orders the deployments tried during startup; ``stuck`` are
        the indices of the study's constraints that no redeployment can repair (on accuracy:
        a method or batch does not raise it), whose violators get no variant."""
        self._base = base
        self._seed = seed
        self._startup = startup_trials
        self._space = space
        self._per_model = trials_per_model
        self._stuck = frozenset(stuck)
        self._variants: dict[int, dict[str, Any]] = {}  # trial id: its fixed params
        self._kernels = KernelCache()

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)
        # Enqueued trials and retries (which carry their params) keep what they have.
        if "fixed_params" in trial.system_attrs or trial.params or VARIANT_OF in trial.user_attrs:
            return
        try:
            chosen = self._claim(study, trial, self._ranked(study, trial)[:MAX_CLAIMS])
        except Exception:  # a variant saves training; failing to find one must not stop a trial
            logger.exception("trial %d: no variant chosen", trial.number)
            return
        if chosen is not None:
            parent, params = chosen
            self._variants[trial._trial_id] = params
            study._storage.set_trial_user_attr(trial._trial_id, VARIANT_OF, parent.number)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        # A variant's params are all fixed; a stateful sampler (GP) keeps one relative space.
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
        fixed = self._variants.get(trial._trial_id, {})
        if param_name in fixed:
            return fixed[param_name]
        return self._base.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._variants.pop(trial._trial_id, None)
        self._base.after_trial(study, trial, state, values)

    def _ranked(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> list[tuple[FrozenTrial, dict[str, Any]]]:
        """Parents and params of the variants predicted to add ``MIN_GAIN``, best first.

        During startup, the random redeployment of a new model instead.
        """
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        per_model = Counter(t.user_attrs.get(VARIANT_OF, t.number) for t in trials)  # by parent
        taken = {frozenset(_planned(t).items()) for t in trials}
        parents = [t for t in complete if not self._stuck & set(violated(t.system_attrs))]
        if len(complete) < self._startup:
            return self._startup_variants(parents, per_model, taken, trial)
        if len(complete) < 2:
            return []
        candidates = []
        for parent in parents:
            if VARIANT_OF not in parent.user_attrs and per_model[parent.number] < self._per_model:
                candidates += [(parent, params) for params in self._untried(parent, taken)]
        if not candidates:
            return []
        signs = [1 if d == StudyDirection.MINIMIZE else -1 for d in study.directions]
        feasible = [t for t in complete if not violated(t.system_attrs)]
        rng = np.random.default_rng([self._seed, trial.number])
        drawn = [self._space.draw(rng) for _ in range(NEW_MODEL_DRAWS)]
        gains, new_gains = predicted_gains(
            self._space, complete, signs, candidates, self._kernels, feasible=feasible,
            new_models=drawn,
        )  # fmt: skip
        bar = max(MIN_GAIN, float(np.mean(new_gains)))  # what a new model is expected to add
        order = np.argsort(gains)[::-1]
        return [candidates[i] for i in order if gains[i] > bar]

    def _claim(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        ranked: list[tuple[FrozenTrial, dict[str, Any]]],
    ) -> tuple[FrozenTrial, dict[str, Any]] | None:
        """The best of ``ranked`` that no other trial has claimed while this one chose.

        Workers choose alone, and a choice takes a while (a Gaussian process fit), so two
        workers may pick the same variant. Each records its pick in the trial's system attrs,
        then looks again and gives the pick up if another trial has it. Two that look at the
        same moment both give it up: that costs a variant, never runs one twice.
        """
        storage = study._storage
        for parent, params in ranked:
            storage.set_trial_system_attr(trial._trial_id, CLAIM, params)
            others = [t for t in study.get_trials(deepcopy=False) if t.number != trial.number]
            if all(_planned(t) != params for t in others):
                return parent, params
        if ranked:
            storage.set_trial_system_attr(trial._trial_id, CLAIM, {})
        return None

    def _startup_variants(
        self,
        complete: list[FrozenTrial],
        per_model: Counter,
        taken: set[frozenset],
        trial: FrozenTrial,
    ) -> list[tuple[FrozenTrial, dict[str, Any]]]:
        """The untried deployments of the oldest complete model short of its startup variants.

        Shuffled: too few trials are in for a prediction, so the order is random (seeded per
        trial).
        """
        most = min(STARTUP_REDEPLOYS + 1, self._per_model)  # trials of one model, all told
        for parent in complete:
            if VARIANT_OF in parent.user_attrs or per_model[parent.number] >= most:
                continue
            params = self._untried(parent, taken)
            if params:
                order = np.random.default_rng([self._seed, trial.number]).permutation(len(params))
                return [(parent, params[i]) for i in order]
        return []

    def _untried(self, parent: FrozenTrial, taken: set[frozenset]) -> list[dict[str, Any]]:
        """Params of the deployments of ``parent``'s model that no trial has or has claimed."""
        fixed = self._space.model_params(parent.params)
        deployments = [{**fixed, **d} for d in self._space.deployments(fixed) or []]
        return [params for params in deployments if frozenset(params.items()) not in taken]


def _planned(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's params, or a starting variant's claimed ones (it suggests them a moment later)."""
    return trial.system_attrs.get(CLAIM) or trial.params
