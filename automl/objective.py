"""The Optuna objective: one trial of a study, recorded in attrs, constraints and artifacts."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from automl.data import Dataset, load_dataset
from automl.space import load_space
from automl.targets import load_target

if TYPE_CHECKING:
    from pathlib import Path

    from optuna.artifacts import FileSystemArtifactStore

    from automl.cache import StageCache
    from automl.space import SearchSpace
    from automl.spec import StudySpec

logger = logging.getLogger("automl.trial")
# Constraints are written in both of Optuna's formats (see _record_constraints) under the same
# keys, so Optuna's notice that one overwrites the other says nothing.
warnings.filterwarnings(
    "ignore", message="Overwrite an old format constraint", category=UserWarning
)
FAIL_REASON = "fail_reason"
_TAKEN = (TrialState.COMPLETE, TrialState.RUNNING)
_QUEUED = (*_TAKEN, TrialState.WAITING)
ARTIFACT_ID = "artifact_id"
VARIANT_OF = "variant_of"


@lru_cache(maxsize=4)
def cached_dataset(source: str, seed: int, data_root: Path | None) -> Dataset:
    """Load a dataset once per process."""
    return load_dataset(source, seed=seed, data_root=data_root)


@dataclass
class StudyObjective:
    """Callable objective for ``study.optimize``; failures become FAIL with their reason."""

    spec: StudySpec
    artifact_store: FileSystemArtifactStore
    data_root: Path | None = None
    threads: int = 1
    cache: StageCache | None = None

    def __call__(self, trial: optuna.Trial) -> list[float]:
        if self._over_budget(trial):
            # Workers check for a free slot before asking; two can pass that check at once.
            raise optuna.TrialPruned(f"over budget: {self.spec.n_trials} trials already taken")
        try:
            return self._run(trial)
        except Exception as e:
            # Recorded for `study show` and the API; Optuna then marks the trial FAIL.
            trial.set_user_attr(FAIL_REASON, f"{type(e).__name__}: {e}")
            raise

    def _over_budget(self, trial: optuna.Trial) -> bool:
        """Whether COMPLETE trials plus RUNNING ones started before this one fill ``n_trials``.

        Trial numbers order the RUNNING trials, so concurrent workers agree on who is in.
        """
        if self.spec.n_trials is None:
            return False
        taken = 0
        for other in trial.study.get_trials(deepcopy=False, states=_TAKEN):
            if other.state == TrialState.COMPLETE or other.number < trial.number:
                taken += 1
        return taken >= self.spec.n_trials

    def _run(self, trial: optuna.Trial) -> list[float]:
        from optuna.artifacts import upload_artifact

        from automl.trial import run_trial

        space = load_space(self.spec.search_space)
        target = load_target(self.spec.target)
        worker = f"{socket.gethostname()}:{os.getpid()}"
        trial.set_user_attr("worker", worker)
        logger.info("study %s: trial %d started by %s", self.spec.name, trial.number, worker)
        candidate = space.suggest(trial)
        trial.set_user_attr("candidate", candidate.as_dict())
        data = cached_dataset(self.spec.dataset, self.spec.seed, self.data_root)
        with tempfile.TemporaryDirectory(prefix="automl-trial-") as workdir:
            outcome = run_trial(
                candidate,
                target,
                data,
                workdir,
                seed=self.spec.seed,
                threads=self.threads,
                cache=self.cache,
            )
            artifact_id = upload_artifact(
                artifact_store=self.artifact_store,
                file_path=str(outcome.artifact),
                study_or_trial=trial,
                mimetype="application/octet-stream",
            )
        for key, value in outcome.metrics.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("timings", outcome.timings)
        trial.set_user_attr("reused", outcome.reused)
        trial.set_user_attr("latency", outcome.latency)
        trial.set_user_attr("latency_source", "measured")
        # A measurement that hit its cap before its CI was tight ran on a noisy machine.
        trial.set_user_attr("latency_noisy", not outcome.latency["converged"])
        trial.set_user_attr("env", outcome.env)
        trial.set_user_attr("history", outcome.history)
        trial.set_user_attr("preprocessing", data.preprocessing)
        trial.set_user_attr(ARTIFACT_ID, artifact_id)
        self._record_constraints(trial, outcome.metrics)
        values = [o.value(outcome.metrics) for o in self.spec.objectives]
        self._enqueue_variants(trial, space, values)
        return values

    def _enqueue_variants(
        self, trial: optuna.Trial, space: SearchSpace, values: list[float]
    ) -> None:
        """Queue the other ``trials_per_model - 1`` deployments of this trial's model.

        Only a model worth exploiting has them: its trial is not itself a variant and no
        complete trial dominates it. They are as many as fit in ``n_trials`` next to the
        trials already complete, running or queued.
        """
        count = self.spec.trials_per_model - 1
        if count <= 0 or VARIANT_OF in trial.user_attrs or self._dominated(trial, values):
            return
        if self.spec.n_trials is not None:
            queued = len(trial.study.get_trials(deepcopy=False, states=_QUEUED))
            count = min(count, self.spec.n_trials - queued)
        fixed = space.model_params(trial.params)
        for _ in range(count):
            trial.study.enqueue_trial(fixed, user_attrs={VARIANT_OF: trial.number})

    def _dominated(self, trial: optuna.Trial, values: list[float]) -> bool:
        """Whether a complete trial is at least as good on every objective and better on one."""
        signs = [1 if o.direction == "minimize" else -1 for o in self.spec.objectives]
        mine = [s * v for s, v in zip(signs, values, strict=True)]
        for other in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            theirs = [s * v for s, v in zip(signs, other.values, strict=True)]
            if theirs != mine and all(t <= m for t, m in zip(theirs, mine, strict=True)):
                return True
        return False

    def _record_constraints(self, trial: optuna.Trial, metrics: dict[str, float]) -> None:
        """Record violations (≤ 0 is feasible) with ``set_constraint`` under index keys.

        optuna-dashboard 0.21 reads only the older list attr ``constraints``; Optuna reads both
        formats into the same index keys, so each constraint counts once. Their names are the
        study's ``constraints`` user attr, in the same order.
        """
        violations = [c.violation(metrics) for c in self.spec.constraints]
        for index, violation in enumerate(violations):
            trial.set_constraint(str(index), violation)
        if violations:
            trial.storage.set_trial_system_attr(trial._trial_id, "constraints", violations)
        trial.set_user_attr("feasible", all(v <= 0 for v in violations))
