"""The object :func:`automl.optimize` and :func:`automl.load` return: a study and its reads.

Every read goes through the functions the CLI and the REST API call (``automl.service``,
``automl.fleet.decide``, ``automl.report.html``), so the three ways in show the same front.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    import optuna
    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

    from automl.records import TrialRecord
    from automl.search.spec import StudySpec


class StudyResult:
    """An automl study: its Optuna study, its spec, its front, and exports of its models.

    Attributes:
        study: The ``optuna.Study``; ``optuna.load_study`` of the same storage reads the same.
        spec: The study's spec, as stored with it.
        ended: Why :func:`automl.optimize` returned: ``done``, ``timeout``, ``stopped``,
            ``interrupted`` (Ctrl-C), ``too-many-failures``, ``converged`` (a serving study
            whose last trials in a row were all screened out); None for :func:`automl.load`.
    """

    def __init__(
        self,
        study: optuna.Study,
        spec: StudySpec,
        storage: BaseStorage,
        artifact_store: FileSystemArtifactStore,
        ended: str | None = None,
    ) -> None:
        self.study = study
        self.spec = spec
        self.ended = ended
        self._storage = storage
        self._artifact_store = artifact_store

    @property
    def name(self) -> str:
        """The study's name."""
        return self.spec.name

    @property
    def front(self) -> list[TrialRecord]:
        """The feasible non-dominated trials by number, read now.

        Each row has ``number``, ``params``, ``values`` (the objectives by metric name),
        ``metrics`` (every recorded metric: ``accuracy`` on the validation split,
        ``test_accuracy`` on the held-out test split, latencies, size…), ``feasible``,
        ``artifact_id`` and the trial's ``user_attrs``.
        """
        from automl.service.read import pareto_front

        return pareto_front(self.name, self._storage)

    def best(self, metric: str = "accuracy", budget: str | None = None) -> TrialRecord:
        """The front's row best on ``metric``, optionally under a budget.

        A budget on a latency metric is decided on new runs of the front's models on this
        machine when it has the study's target, and a trial within noise of the budget is
        passed over (see :func:`automl.fleet.decide.pick_trial`, which also says why).

        Args:
            metric: The metric to optimise in its natural direction, e.g. ``accuracy``.
            budget: A constraint such as ``"latency_p99_ms <= 2"``.

        Returns:
            The chosen row of :attr:`front`.

        Raises:
            SpecError: Unknown metric or malformed budget.
            TrialNotFound: The front is empty, or no front trial meets the budget.
        """
        from automl.fleet.decide import pick_trial

        pick = pick_trial(
            self.name, self._storage, metric, budget, artifact_store=self._artifact_store
        )
        return next(row for row in self.front if row["number"] == pick.number)

    def export(self, trial: int | TrialRecord, path: Path | str) -> dict:
        """Write a trial's ONNX model to ``path`` and its ``.json`` sidecar beside it.

        Args:
            trial: A trial number, or a row of :attr:`front`.
            path: The ``.onnx`` file to write; its folder is created.

        Returns:
            The sidecar: params, metrics, preprocessing, input and output, the file's sha256.

        Raises:
            TrialNotFound: No such trial, or it has no model (it did not complete).
        """
        from automl.service.exports import export_model

        number = trial if isinstance(trial, int) else trial["number"]
        return export_model(self.name, self._storage, self._artifact_store, number, path)

    def report(self, path: Path | str, *, models: bool = True) -> Path:
        """Write the study's self-contained HTML report.

        Args:
            path: The HTML file to write; its folder is created.
            models: Export the front's models to a ``models/`` folder beside it, so the
                report's links work offline.

        Returns:
            The report's path.
        """
        from automl.report.html import write_report

        store = self._artifact_store if models else None
        return write_report(self.name, self._storage, path, store)

    def __repr__(self) -> str:
        ended = f", ended={self.ended!r}" if self.ended else ""
        return f"StudyResult(name={self.name!r}, target={self.spec.target!r}{ended})"
