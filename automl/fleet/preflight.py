"""What runs before a study's first trial, for every way in: the CLI, the Python API, a worker.

:func:`prepare_studies` checks, in this order, that a target can be measured here, that a
user's trained model scores above chance, that the tracking store answers, and only then creates
the studies (or resumes them), so that a refused input leaves no study behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from automl.fleet.tracking import tracker
from automl.search.compat import study_methods
from automl.service.studies import create_study, retry_failed
from automl.targets import is_present, load_target, require_present
from automl.trials.model_check import check_study_model

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.storages import BaseStorage

    from automl.search.spec import StudySpec


def prepare_studies(
    specs: Sequence[StudySpec],
    store: BaseStorage,
    *,
    detach: bool = False,
    forgive_failures: bool = False,
    tracking_uri: str | None = None,
) -> list[StudySpec]:
    """Check ``specs`` and create their studies; return those that can run on this machine.

    Args:
        specs: One spec per study (per target, for ``--target cpu,a100``).
        store: The storage the studies live in.
        detach: Create the studies for workers elsewhere: nothing that needs the target, the
            data or the weights is checked here (they may exist on the workers only).
        forgive_failures: Let studies that ended on too many failed trials run again.
        tracking_uri: An MLflow tracking URI: its experiments are opened before any study
            is created, so a dead server leaves nothing queued.

    Raises:
        TargetUnavailable: Not detached, and no spec's target can be measured here.
        InputRefused: A trained model scores at chance, or cannot be loaded or exported.
        SpecError: The tracking store cannot be opened, or a spec is refused.
    """
    runnable = [s for s in specs if is_present(load_target(s.target), methods=study_methods(s))]
    if not detach:
        if not runnable:
            require_present(load_target(specs[0].target), study_methods(specs[0]))
        for spec in runnable:
            tracker(tracking_uri, spec)
        for spec in specs:
            check_study_model(spec)
    for spec in specs:
        create_study(spec, store, check_data=not detach)
        if forgive_failures:
            retry_failed(spec.name, store)
    return runnable
