"""Experiment tracking: each finished trial logged as one MLflow run, when a tracking URI is set.

Off unless ``AUTOML_MLFLOW_URI`` (``--mlflow-uri``, ``optimize(mlflow_uri=...)``) names one.
Trials land in an MLflow experiment named after the study; each run holds the trial's params,
its recorded metrics (validation and test accuracy, latency, size, ...) and its state.

It talks to the tracking server through :class:`mlflow.MlflowClient` alone, so it changes
neither the process-wide tracking URI nor the active run of a notebook that uses MLflow too.
(optuna-integration's ``MLflowCallback`` sets both, and is deprecated since its 4.9.)
"""

from __future__ import annotations

import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

from automl.errors import SpecError

if TYPE_CHECKING:
    from datetime import datetime

    import optuna

    from automl.search.spec import StudySpec

logger = logging.getLogger("automl.fleet.tracking")
_INSTALL = "install it with `pip install -c constraints.txt '.[mlflow]'`"
_RUN_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
_TAGGED_ATTRS = ("fail_reason", "feasible", "variant_of", "worker")


def check_reachable(tracking_uri: str, timeout_s: float = 5.0) -> None:
    """Refuse an HTTP tracking URI where no server answers within ``timeout_s``: MLflow's
    client would retry for minutes before it failed.

    Raises:
        SpecError: Nothing answers there (any HTTP answer counts as a server).
    """
    if not tracking_uri.startswith(("http://", "https://")):
        return
    url = urllib.parse.urlsplit(tracking_uri)
    host = url.hostname or ""
    netloc = f"{host}:{url.port}" if url.port else host
    shown = url._replace(netloc=netloc).geturl()  # no credentials in a message
    try:
        probe = url._replace(netloc=netloc, path=url.path.rstrip("/") + "/health").geturl()
        urllib.request.urlopen(probe, timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return  # a server answered (401 without its credentials included)
    except (OSError, ValueError) as e:  # refused, unreachable, timed out, a malformed URL
        if isinstance(getattr(e, "reason", e), ssl.SSLError):
            return  # a server answered; MLflow's own client judges its certificate
        raise SpecError(
            f"no MLflow tracking server answers at {shown!r} ({getattr(e, 'reason', e)}); "
            "start it, or fix --mlflow-uri or AUTOML_MLFLOW_URI"
        ) from None


class MlflowTracker:
    """An Optuna callback that logs each finished trial of one study as an MLflow run.

    A tracking server that fails while the study runs costs that trial's run, never the trial:
    the failure is logged as a warning and the study goes on.
    """

    def __init__(self, tracking_uri: str, spec: StudySpec) -> None:
        """Open the tracking store and the study's experiment (created if missing).

        Args:
            tracking_uri: An MLflow tracking URI: a server (``http://host:5000``) or a database
                (``sqlite:///mlflow.db``).
            spec: The study's spec; its name names the experiment.

        Raises:
            SpecError: MLflow is not installed, or the tracking store cannot be opened.
        """
        check_reachable(tracking_uri)  # first: importing MLflow takes seconds
        try:
            from mlflow import MlflowClient
            from mlflow.exceptions import MlflowException
        except ImportError:
            raise SpecError(
                f"MLflow tracking (AUTOML_MLFLOW_URI, --mlflow-uri) needs MLflow, which is not "
                f"installed; {_INSTALL}"
            ) from None
        self._errors = (MlflowException, OSError)
        self._spec = spec
        try:
            self._client = MlflowClient(tracking_uri)
            self.experiment_id = self._experiment(spec.name)
        except self._errors as e:
            raise SpecError(
                f"cannot log to MLflow at {tracking_uri!r} ({type(e).__name__}: {e}); "
                "check AUTOML_MLFLOW_URI / --mlflow-uri"
            ) from None

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Log ``trial``, once it has finished (Optuna calls this after each trial)."""
        try:
            self.log(trial)
        except self._errors as e:
            logger.warning("trial %d was not logged to MLflow: %s", trial.number, e)

    def log(self, trial: optuna.trial.FrozenTrial) -> str:
        """Log ``trial`` as a new run of the study's experiment; returns the run's id."""
        from mlflow.entities import Metric, Param, RunTag

        start_ms = _ms(trial.datetime_start)
        end_ms = _ms(trial.datetime_complete) or start_ms
        run = self._client.create_run(
            self.experiment_id, start_time=start_ms, run_name=f"trial {trial.number}"
        )
        run_id = run.info.run_id
        metrics = [Metric(name, float(value), end_ms or 0, 0) for name, value in _metrics(trial)]
        params = [Param(name, str(value)) for name, value in trial.params.items()]
        tags = [RunTag(name, value) for name, value in self._tags(trial).items()]
        self._client.log_batch(run_id, metrics=metrics, params=params, tags=tags)
        status = _RUN_STATUS.get(trial.state.name, "FAILED")
        self._client.set_terminated(run_id, status=status, end_time=end_ms)
        return run_id

    def _experiment(self, name: str) -> str:
        """The id of experiment ``name``, created if missing (another worker may race us)."""
        from mlflow.exceptions import MlflowException

        found = self._client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self._client.create_experiment(name)
        except MlflowException:  # created meanwhile by another worker
            found = self._client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _tags(self, trial: optuna.trial.FrozenTrial) -> dict[str, str]:
        from mlflow.utils.validation import MAX_TAG_VAL_LENGTH

        tags = {
            "optuna.study": self._spec.name,
            "optuna.trial_number": str(trial.number),
            "optuna.state": trial.state.name,
            "automl.target": self._spec.target,
        }
        for key in _TAGGED_ATTRS:
            if key in trial.user_attrs:
                tags[f"automl.{key}"] = str(trial.user_attrs[key])[:MAX_TAG_VAL_LENGTH]
        return tags


def tracker(tracking_uri: str | None, spec: StudySpec) -> list[MlflowTracker]:
    """The study loop's callbacks: an :class:`MlflowTracker` when a URI is set, else none."""
    return [MlflowTracker(tracking_uri, spec)] if tracking_uri else []


def _metrics(trial: optuna.trial.FrozenTrial) -> list[tuple[str, float]]:
    """The recorded metrics a trial has (a failed trial may have none)."""
    from automl.records import RECORDED_METRICS  # here: the CLI probes a server before Optuna

    found = []
    for name in RECORDED_METRICS:
        value = trial.user_attrs.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            found.append((name, float(value)))
    return found


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)
