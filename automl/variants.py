"""Variants: more deployments of a model on the front, at no training cost.

Training dominates a trial, and bit-width, int8 mode and serving batch do not change the
weights. :class:`VariantSampler` wraps the study's sampler: when a trial starts, it may become a
variant of a model on the front, with that model's params fixed (as Optuna's
``PartialFixedSampler`` does) and the deployment knobs left to the wrapped sampler. The stage
cache then skips its training and fine-tuning.
"""

from __future__ import annotations

from collections import Counter
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

VARIANT_OF = "variant_of"


class VariantSampler(optuna.samplers.BaseSampler):
    """A sampler whose new trials may redeploy a model on the front.

    The parent is the newest complete trial that is not a variant itself, whose model is on the
    front (no complete trial dominates it or one of its variants), and that has fewer than
    ``trials_per_model - 1`` variants. Enqueued and retried trials keep their own params.
    Nothing is queued: two workers picking the same parent at once give it one variant more.
    """

    def __init__(
        self, base: optuna.samplers.BaseSampler, space: SearchSpace, trials_per_model: int
    ) -> None:
        self._base = base
        self._space = space
        self._per_model = trials_per_model
        self._fixed: dict[int, dict[str, Any]] = {}

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)
        if "fixed_params" in trial.system_attrs or VARIANT_OF in trial.user_attrs:
            return
        parent = self._parent(study)
        if parent is not None:
            self._fixed[trial._trial_id] = self._space.model_params(parent.params)
            study._storage.set_trial_user_attr(trial._trial_id, VARIANT_OF, parent.number)

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        fixed = self._fixed.get(trial._trial_id, {})
        space = self._base.infer_relative_search_space(study, trial)
        return {name: d for name, d in space.items() if name not in fixed}

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
        fixed = self._fixed.get(trial._trial_id, {})
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
        self._fixed.pop(trial._trial_id, None)
        self._base.after_trial(study, trial, state, values)

    def _parent(self, study: optuna.Study) -> FrozenTrial | None:
        trials = study.get_trials(deepcopy=False)
        variants = Counter(t.user_attrs.get(VARIANT_OF) for t in trials)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        signs = [1 if d == StudyDirection.MINIMIZE else -1 for d in study.directions]
        front = _front(complete, signs)
        # Models with a trial on the front, by their parent's number.
        on_front = {t.user_attrs.get(VARIANT_OF, t.number) for t in complete if t.number in front}
        for trial in reversed(complete):
            if VARIANT_OF in trial.user_attrs or variants[trial.number] >= self._per_model - 1:
                continue
            if trial.number in on_front:
                return trial
        return None


def _front(trials: list[FrozenTrial], signs: list[int]) -> set[int]:
    """Numbers of the trials that no other trial dominates (all objectives minimised by sign)."""
    if not trials:
        return set()
    values = np.array([t.values for t in trials]) * np.array(signs)
    no_worse = (values[:, None, :] <= values[None, :, :]).all(axis=2)  # [j, i]: j ≤ i everywhere
    better = (values[:, None, :] < values[None, :, :]).any(axis=2)
    dominated = (no_worse & better).any(axis=0)
    return {t.number for t, d in zip(trials, dominated, strict=True) if not d}
