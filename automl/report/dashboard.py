"""optuna-dashboard on the study storage and the artifact store.

optuna-dashboard has no authentication and its API can create, rename and delete studies and
upload or delete artifacts, so it binds to the loopback interface unless asked otherwise, and
warns when it is.

optuna-dashboard 0.21 marks a multi-objective study's best trials by dominance alone, so an
infeasible trial could show as best. :func:`run_dashboard` has it take ``study.best_trials``'
rule instead: among feasible trials only, where the study has constraints.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from automl.hosts import is_loopback

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.study import StudyDirection
    from optuna.trial import FrozenTrial

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def exposure_warning(host: str) -> str | None:
    """The warning to show before serving on ``host``, or None for a loopback host."""
    if is_loopback(host):
        return None
    return (
        f"optuna-dashboard has no authentication: binding to {host} lets anyone who can reach "
        "this machine read, change and delete studies and models. Prefer 127.0.0.1 with an SSH "
        "tunnel (ssh -L 8080:127.0.0.1:8080 host)."
    )


def best_trials(
    trials: Sequence[FrozenTrial], directions: Sequence[StudyDirection]
) -> list[FrozenTrial]:
    """The Pareto front of ``trials`` as ``optuna.Study.best_trials`` has it.

    Feasible complete trials only where any trial has constraints, and ordered by number, as
    optuna-dashboard lists its best trials.
    """
    from optuna.study._constrained_optimization import _is_constrained_optimization
    from optuna.study._multi_objective import _get_pareto_front_trials_by_trials

    constrained = _is_constrained_optimization(trials)
    front = _get_pareto_front_trials_by_trials(trials, directions, consider_constraint=constrained)
    return sorted(front, key=lambda t: t.number)


def run_dashboard(
    storage_url: str,
    artifacts_dir: Path | str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
) -> None:
    """Serve optuna-dashboard until interrupted; blocks.

    The dashboard shows each study's objective names, user attrs (metrics, latency, timings,
    environment), constraints and each trial's ONNX artifact, downloadable.

    Args:
        storage_url: SQLAlchemy URL of the study storage.
        artifacts_dir: Folder of the filesystem artifact store the trials uploaded to.
        host: Interface to bind; anything but loopback logs :func:`exposure_warning`.
        port: TCP port.

    Raises:
        SpecError: The storage URL is malformed.
        StorageUnavailable: The storage cannot be opened, or is a SQLite file that does not
            exist (the dashboard creates none).
    """
    import optuna_dashboard
    import optuna_dashboard._app
    from optuna.artifacts import FileSystemArtifactStore

    from automl.settings import get_settings
    from automl.storage.factory import open_storage

    warning = exposure_warning(host)
    if warning:
        logger.warning(warning)
    storage = open_storage(storage_url, get_settings(), create=False)  # a typo is no new store
    artifacts_dir = Path(artifacts_dir)
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    optuna_dashboard._app.get_pareto_front_trials = best_trials
    optuna_dashboard.run_server(
        storage, host=host, port=port, artifact_store=FileSystemArtifactStore(str(artifacts_dir))
    )
