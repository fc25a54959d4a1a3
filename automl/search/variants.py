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

from automl.records import built_of, violated
from automl.search.front_gain import KernelCache, predicted_gains

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.distributions import BaseDistribution
    from optuna.trial import FrozenTrial

    from automl.search.space import SearchSpace

logger = logging.getLogger("automl.search.variants")
VARIANT_OF = "variant_of"
# User attr of a complete trial whose params differ from an earlier one's only in a pruning
# ratio that built the same widths from the same trained weights: it deployed that trial's
# model (see :meth:`VariantSampler.model_key`), and the two count as one model.
SAME_MODEL_AS = "same_model_as"
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

    Two params may build one model: pruning keeps channels in multiples of the target's
    ``channel_multiple``, so ratios 0.2 and 0.3 of one trained model may keep the same widths
    and fine-tune to the same weights. A complete trial whose model an earlier one built is
    marked ``same_model_as`` that trial (an Optuna user sees it in its user attrs), and the two
    count as one model: its trials per model, and the deployments tried, are theirs together.

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
        if state == TrialState.COMPLETE:
            try:
                self._mark_same_model(study, trial)
            except Exception:  # a mark helps later choices; failing to set it must not fail a trial
                logger.exception("trial %d: its model was not compared", trial.number)
        self._base.after_trial(study, trial, state, values)

    def model_key(self, trial: FrozenTrial) -> tuple | None:
        """What decides the model a complete trial built: its params but the deployment and
        the pruning ratio, whether it was fine-tuned (a ratio above 0 is), and the widths that
        pruning kept; ``None`` where the trial recorded no widths or the space lacks a param."""
        built = built_of(trial.user_attrs)
        if built is None or not built.widths or not set(trial.params) <= set(self._space.params):
            return None
        model = self._space.model_params(trial.params)
        ratios = [n for n in model if (self._space.params[n].sets or n) == "pruning_ratio"]
        ratio = model.pop(ratios[0]) if ratios else 0.0
        return frozenset(model.items()), ratio > 0, built.widths

    def _mark_same_model(self, study: optuna.Study, trial: FrozenTrial) -> None:
        """Mark ``trial`` ``SAME_MODEL_AS`` the first complete trial that built its model."""
        key = self.model_key(trial)
        if key is None or VARIANT_OF in trial.user_attrs:
            return
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        models = _models(complete)
        for other in complete:
            if other.number < trial.number and self.model_key(other) == key:
                first = models[other.number]
                study._storage.set_trial_user_attr(trial._trial_id, SAME_MODEL_AS, first)
                return

    def _ranked(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> list[tuple[FrozenTrial, dict[str, Any]]]:
        """Parents and params of the variants predicted to add ``MIN_GAIN``, best first.

        During startup, the random redeployment of a new model instead.
        """
        trials = study.get_trials(deepcopy=False)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        models = _models(trials)
        per_model = Counter(models.values())
        taken = self._taken(trials, models)
        parents = [
            t for t in complete
            if not self._stuck & set(violated(t.system_attrs)) and SAME_MODEL_AS not in t.user_attrs
        ]  # fmt: skip
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

    def _taken(self, trials: list[FrozenTrial], models: dict[int, int]) -> set[frozenset]:
        """The params each trial has or has claimed, and the same deployments of the model it
        deployed, as that model's first trial's params name it."""
        by_number = {t.number: t for t in trials}
        taken = set()
        for trial in trials:
            planned = _planned(trial)
            taken.add(frozenset(planned.items()))
            first = by_number.get(models[trial.number])
            if first is not None and first is not trial and set(planned) <= set(self._space.params):
                own = self._space.model_params(planned)
                deployment = {k: v for k, v in planned.items() if k not in own}
                model = self._space.model_params(first.params)
                taken.add(frozenset({**model, **deployment}.items()))
        return taken

    def _untried(self, parent: FrozenTrial, taken: set[frozenset]) -> list[dict[str, Any]]:
        """Params of the deployments of ``parent``'s model that no trial has or has claimed."""
        fixed = self._space.model_params(parent.params)
        deployments = [{**fixed, **d} for d in self._space.deployments(fixed) or []]
        return [params for params in deployments if frozenset(params.items()) not in taken]


def _models(trials: list[FrozenTrial]) -> dict[int, int]:
    """The model each trial deployed, by trial number: the number of the first trial that
    built it (a variant's parent, or the trial it is ``SAME_MODEL_AS``)."""
    first = {t.number: t.user_attrs.get(SAME_MODEL_AS, t.number) for t in trials}
    return {
        t.number: first.get(t.user_attrs[VARIANT_OF], t.user_attrs[VARIANT_OF])
        if VARIANT_OF in t.user_attrs
        else first[t.number]
        for t in trials
    }


def _planned(trial: FrozenTrial) -> dict[str, Any]:
    """A trial's params, or a starting variant's claimed ones (it suggests them a moment later)."""
    return trial.system_attrs.get(CLAIM) or trial.params
