"""The Optuna objective: one trial of a study, recorded in attrs, constraints and artifacts."""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import optuna

from automl.errors import Aborted, DataError, DiskFull, InputRefused, TargetUnavailable
from automl.hosts import worker_name
from automl.inputs.data import DESCRIPTION_ATTR, cached_dataset, describe_dataset
from automl.records import (
    ARTIFACT_ID,
    CONVERGED_ATTR,
    FAIL_REASON,
    OVER_BUDGET,
    REPEAT_OF,
    SCREENED,
    WORKER,
    constraint_attrs,
)
from automl.search.baseline import baseline_batch
from automl.search.compat import check_compatible, space_methods
from automl.search.space import load_space
from automl.storage.artifacts import disk_full
from automl.storage.capabilities import count_taken, set_trial_attrs
from automl.targets import load_target, require_present
from automl.targets.presence import require_pinned_gpu
from automl.trials.screen import (
    converged_after,
    converged_reason,
    measured_twin,
    rate_to_beat,
    repeat_reason,
    untried_params,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from optuna.artifacts import FileSystemArtifactStore

    from automl.inputs.onnx_model import OnnxModel
    from automl.inputs.trained_model import TrainedModel
    from automl.search.space import SearchSpace
    from automl.search.spec import StudySpec
    from automl.targets import Target
    from automl.trials.model_check import CheckedModel
    from automl.trials.stage_cache import StageCache

INTERRUPTED = "interrupted: a second stop signal (Ctrl-C or SIGTERM) aborted the trial"
DISK_FULL = (  # under 160 characters: the CLI's one line
    "no space left, over quota, or read-only: this worker stops for every study; free space in "
    "AUTOML_ARTIFACTS_DIR and the temp folder, or make them writable"
)
logger = logging.getLogger("automl.trials.trial")


@dataclass
class StudyObjective:
    """Callable objective for ``study.optimize``; failures become FAIL with their reason."""

    spec: StudySpec
    artifact_store: FileSystemArtifactStore
    threads: int = 1
    cache: StageCache | None = None
    trial_id: int | None = None  # the trial this objective last started
    aborted: Callable[[], bool] = lambda: False  # whether a second Ctrl-C has come
    data_root: str | None = None  # a REST submission's: its files must still lie under it
    # Why this host could not measure the last trial: the host's fault, not the candidate's.
    unavailable: TargetUnavailable | None = None
    screened_in_a_row: int = 0  # a serving study's trials screened out, by this objective

    def __call__(self, trial: optuna.Trial) -> list[float]:
        self.trial_id = trial._trial_id
        # First, before any import: a parent that outlives this process fails its trials by it.
        _set_attrs(trial, {WORKER: worker_name()})
        if self._over_budget(trial):
            # Workers check for a free slot before asking; two can pass that check at once.
            trial.set_user_attr(OVER_BUDGET, True)
            raise optuna.TrialPruned(f"over budget: {self.spec.n_trials} trials already taken")
        try:
            values = self._run(trial)
        except optuna.TrialPruned:  # screened out: its attrs say why
            self._count_screened(trial)
            raise
        except Exception as e:
            if self.aborted():  # the abort, turned into another error by a library (torch)
                trial.set_user_attr(FAIL_REASON, INTERRUPTED)
                raise Aborted from e
            # A full disk: one line, not the library's traceback, and this worker stops.
            error = DiskFull(DISK_FULL) if disk_full(e) else e
            # Recorded for `study show` and the API; Optuna then marks the trial FAIL.
            trial.set_user_attr(FAIL_REASON, f"{type(error).__name__}: {error}")
            if isinstance(error, TargetUnavailable):
                self.unavailable = error
            if error is not e:
                raise error from e
            raise
        except KeyboardInterrupt:  # a second Ctrl-C: Optuna marks the trial FAIL and re-raises
            trial.set_user_attr(FAIL_REASON, INTERRUPTED)
            raise
        self.screened_in_a_row = 0
        return values

    def check_inputs(self) -> None:
        """Load the space, target and dataset before any trial.

        A file missing on this host then stops this worker's loop, instead of failing every
        trial of the study.

        Raises:
            SpecError: The space or target cannot be loaded, the space's families cannot take
                the data, or the trained model cannot be loaded and exported, or every
                ``keep_fp32`` of the space keeps all of the model's layers (see :attr:`space`).
            DataError: The dataset cannot be loaded.
            TargetUnavailable: This machine cannot measure a method of the space on the
                target (e.g. int8-trt without TensorRT): the message names the install. Or
                this process's GPU is not the target's (a host of several GPU models).
        """
        space, target = self._space_and_target
        self._check_confined()
        try:
            data = cached_dataset(**self.spec.data_args)
        except DataError:
            raise
        except Exception as e:  # whatever a plugin or a broken file raises
            raise DataError(f"dataset {self.spec.dataset_shown!r}: {type(e).__name__}: {e}") from e
        check_compatible(space, data, target)  # family vs data, methods vs target
        require_present(target, sorted(space_methods(space)))  # and their runtimes here
        require_pinned_gpu(target)  # and this process's GPU is one of the target's
        _ = self.space  # the trained model's check, and the space resolved for it

    def _check_confined(self) -> None:
        """Refuse a file of a REST submission that now resolves outside its data root (a link
        swapped after the submission was checked). A file missing here is this host's to fix:
        loading it says so."""
        if self.data_root is None:
            return
        root = Path(self.data_root)
        files = [("dataset", self.spec.dataset)] if self.spec.dataset.endswith(".npz") else []
        if self.spec.model is not None:
            files.append(("model.weights", self.spec.model.weights))
        for field, path in files:
            if Path(path).exists() and not Path(path).resolve().is_relative_to(root):
                raise InputRefused(
                    f"{field} of study {self.spec.name!r} now resolves outside the data root "
                    f"{str(root)!r} it was checked under; a link was changed after the "
                    "submission. Submit the study again."
                )

    @cached_property
    def _checked(self) -> CheckedModel | None:
        """The study's trained model, checked once per objective; None when it trains its own."""
        if self.spec.model is None:
            return None
        from automl.trials.model_check import check_trained_model

        return check_trained_model(self.spec, cached_dataset(**self.spec.data_args))

    @property
    def _trained(self) -> TrainedModel | OnnxModel | None:
        return None if self._checked is None else self._checked.model

    @cached_property
    def space(self) -> SearchSpace:
        """The study's space, resolved for its trained model (``keep_fp32`` below its layer
        count, see :meth:`SearchSpace.for_model`): what its trials, and the variants of its
        sampler, draw from.

        Raises:
            InputRefused: Every ``keep_fp32`` of the space keeps all of the model's layers.
        """
        space = self._space_and_target[0]
        return space if self._checked is None else self._checked.resolve(space)

    @property
    def model_fingerprint(self) -> str | None:
        """What defines the study's trained model (see :meth:`TrainedModel.fingerprint`)."""
        return None if self._trained is None else self._trained.fingerprint()

    @cached_property
    def _space_and_target(self) -> tuple[SearchSpace, Target]:
        """Parsed once per objective: YAML and validation cost about 12 ms a trial."""
        return load_space(self.spec.search_space), load_target(self.spec.target)

    def _over_budget(self, trial: optuna.Trial) -> bool:
        """Whether COMPLETE trials plus RUNNING ones started before this one fill ``n_trials``.

        Trial numbers order the RUNNING trials, so concurrent workers agree on who is in.
        """
        if self.spec.n_trials is None:
            return False
        taken = count_taken(trial.storage, trial.study._study_id, trial.number)
        return taken >= self.spec.n_trials

    def _run(self, trial: optuna.Trial) -> list[float]:
        from optuna.artifacts import upload_artifact

        from automl.trials.confirm import confirm_latency
        from automl.trials.trial import run_trial

        space, target = self.space, self._space_and_target[1]
        logger.info("study %s: trial %d started by %s", self.spec.name, trial.number, worker_name())
        candidate = space.suggest(trial)
        _set_attrs(trial, {"candidate": candidate.as_dict()})
        self._screen_repeat(trial, space)
        data = cached_dataset(**self.spec.data_args)
        with tempfile.TemporaryDirectory(prefix="automl-trial-") as workdir:
            outcome = run_trial(
                candidate,
                target,
                data,
                workdir,
                seed=self.spec.seed,
                threads=self.threads,
                cache=self.cache,
                constraints=self.spec.constraints,
                trained=self._trained,
                baseline_batch=baseline_batch(self.spec, space),
                serving=self.spec.serving,
                screen=lambda metrics: rate_to_beat(trial.study, self.spec, metrics),
            )
            artifact_id = upload_artifact(
                artifact_store=self.artifact_store,
                file_path=str(outcome.artifact),
                study_or_trial=trial,
                mimetype="application/octet-stream",
            )
            confirmed = confirm_latency(
                outcome.artifact, target, data, candidate, outcome.latency,
                self.spec.constraints, outcome.metrics, self.cache,
            )  # fmt: skip
        attrs = {
            **outcome.metrics,
            "timings": outcome.timings,
            "reused": outcome.reused,
            "latency": outcome.latency,
            "latency_source": "measured",
            # A measurement that hit its cap before its CI was tight ran on a noisy machine.
            "latency_noisy": not (outcome.latency["converged"] or outcome.latency["over_budget"]),
            "env": outcome.env,
            "history": outcome.history,
            **({"serving": outcome.serving} if outcome.serving else {}),
            **({"quantization": outcome.quantization} if outcome.quantization else {}),
            "preprocessing": data.preprocessing,
            DESCRIPTION_ATTR: describe_dataset(data),
            ARTIFACT_ID: artifact_id,
        }
        if getattr(self._trained, "output_layer", None):  # found, or named: kept whole
            attrs["output_layer"] = self._trained.output_layer
        if reason := (outcome.serving or {}).get("screened"):  # no max rate: never on a front
            _set_attrs(trial, {**attrs, SCREENED: reason})
            raise optuna.TrialPruned(reason)
        judged = outcome.metrics
        if confirmed is not None:  # a latency constraint broken at first: judged on more runs
            attrs["latency_confirmed"] = confirmed
            judged = {**judged, **confirmed.get("judged", {})}
        violations = [c.violation(judged) for c in self.spec.constraints]
        attrs["feasible"] = all(v <= 0 for v in violations)
        _set_attrs(trial, attrs, constraint_attrs(violations))
        return [o.value(outcome.metrics) for o in self.spec.objectives]

    def _count_screened(self, trial: optuna.Trial) -> None:
        """Count a screened trial; after :func:`converged_after` in a row, mark the study
        converged, which ends it."""
        self.screened_in_a_row += 1
        if self.screened_in_a_row >= converged_after(self.spec.n_trials):
            trial.study.set_user_attr(CONVERGED_ATTR, converged_reason(self.screened_in_a_row))

    def _screen_repeat(self, trial: optuna.Trial, space: SearchSpace) -> None:
        """Prune a max-rate serving study's repeat of a measured deployment (see
        :func:`automl.trials.screen.measured_twin`), and queue an untried one in its place.

        Raises:
            optuna.TrialPruned: The trial repeats one.
        """
        serving = self.spec.serving
        if serving is None or serving.rate_rps != "max":
            return
        twin = measured_twin(trial.study, trial.params, trial.number)
        if twin is None:
            return
        rng = np.random.default_rng((self.spec.seed, trial.number))
        ending = self.screened_in_a_row + 1 >= converged_after(self.spec.n_trials)
        untried = None if ending else untried_params(trial.study, space, rng)  # none left queued
        if untried is not None:
            trial.study.enqueue_trial(untried)
        reason = repeat_reason(twin, redirected=untried is not None)
        _set_attrs(trial, {SCREENED: reason, REPEAT_OF: twin})
        raise optuna.TrialPruned(reason)


def _set_attrs(trial: optuna.Trial, user_attrs: dict, system_attrs: dict | None = None) -> None:
    """Set attrs on ``trial``: in one transaction where the storage can (ours can)."""
    system_attrs = system_attrs or {}
    set_trial_attrs(trial.storage, trial._trial_id, user_attrs, system_attrs)
    # As Trial.set_user_attr keeps them (Optuna has no public way to refresh a live trial):
    trial._cached_frozen_trial.user_attrs.update(user_attrs)
    trial._cached_frozen_trial.system_attrs.update(system_attrs)
