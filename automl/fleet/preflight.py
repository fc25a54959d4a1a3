"""What runs before a study's first trial, for every way in: the CLI, the Python API, a worker.

:func:`prepare_studies` checks, in this order, that a target can be measured here, that each
spec's space, target and data can make its study (see
:func:`automl.service.create.check_study`), that the tracking store answers, that a user's
trained model scores above chance and that the load harness of a serving study is quick enough
for its SLO. Each check runs on every spec before any study is created (or resumed), through
the one pre-flight of :mod:`automl.service.preflight`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING

from automl.catalog import get_backend
from automl.errors import SpecError, TargetUnavailable
from automl.fleet.tracking import tracker
from automl.search.compat import study_methods
from automl.search.space import load_space, with_scenario
from automl.service.create import check_study, create_checked
from automl.service.preflight import preflight
from automl.service.studies import retry_failed
from automl.targets import is_present, load_target, require_present

if TYPE_CHECKING:
    from collections.abc import Sequence

    from optuna.storages import BaseStorage

    from automl.search.spec import StudySpec

# The SLO suggested to a refused serving study leaves its harness floor this much room.
_SLO_HEADROOM = 1.5


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
        TargetUnavailable: Not detached, and no spec's target can be measured here, or a
            space searches a runtime that cannot start here (see :func:`check_runtimes`).
        InputRefused: A trained model scores at chance, or cannot be loaded or exported.
        SpecError: A serving study's load harness is too slow for its SLO here (see
            :func:`check_harness`).
        SpecError: The tracking store cannot be opened, or a spec is refused.
    """
    checked = {}

    def check(spec: StudySpec) -> None:
        checked[spec.name] = check_study(spec, store, check_data=not detach)

    runnable = [s for s in specs if is_present(load_target(s.target), methods=study_methods(s))]
    checks: tuple = (check,)
    if not detach:
        from automl.trials.model_check import check_study_model  # imports torch

        if not runnable:
            require_present(load_target(specs[0].target), study_methods(specs[0]))
        checks += (
            check_runtimes, partial(_track, tracking_uri, runnable), check_study_model,
            check_harness,
        )  # fmt: skip

    def create(spec: StudySpec) -> None:
        create_checked(checked[spec.name], store)
        if forgive_failures:
            retry_failed(spec.name, store)

    preflight(specs, checks, create)
    return runnable


def _track(tracking_uri: str | None, runnable: Sequence[StudySpec], spec: StudySpec) -> None:
    """Open the tracking experiment of ``spec`` where it runs here."""
    if spec in runnable:
        tracker(tracking_uri, spec)


def check_runtimes(spec: StudySpec) -> None:
    """Refuse a study whose space searches a runtime that cannot start here, in one line.

    Raises:
        TargetUnavailable: A runtime of the space's ``runtime`` knob cannot start.
    """
    for runtime in sorted(load_space(spec.search_space).runtime_choices()):
        if reason := get_backend(runtime).unavailable():
            raise TargetUnavailable(
                f"search space {spec.search_space!r} searches runtime {runtime!r}, which "
                f"cannot start on this machine: {reason}"
            )


def check_harness(spec: StudySpec) -> None:
    """Refuse a serving study whose load harness alone takes more than a tenth of its SLO here.

    The floor is :func:`automl.pipeline.serving_floor.host_floor`: what every load figure of the
    study would include, measured as each of its trials is judged after its load runs.

    Raises:
        SpecError: The floor exceeds ``MAX_FLOOR_SHARE`` of ``slo_p99_ms``.
    """
    from automl.pipeline.serving_floor import MAX_FLOOR_SHARE, host_floor

    scenario = with_scenario(spec, load_space(spec.search_space)).serving
    if scenario is None:
        return
    floor = host_floor(scenario)
    if floor.too_high:
        raise SpecError(
            f"the load harness alone takes p99 {floor.p99_ms:.3g} ms at {floor.rate_rps:,.0f} "
            f"requests/s on this host, more than {MAX_FLOOR_SHARE:.0%} of the "
            f"{scenario.slo_p99_ms:g} ms SLO: its figures would measure the harness, not the "
            f"model. Raise it with --slo-p99-ms {suggested_slo_ms(floor.p99_ms):g} (or "
            "slo_p99_ms in the spec's serving:), or run on a host with idle cores"
        )


def suggested_slo_ms(floor_p99_ms: float) -> float:
    """The least round SLO (1, 2 or 5 × 10^k ms) within which a harness floor of
    ``floor_p99_ms`` is under ``MAX_FLOOR_SHARE`` with room to spare.

    The room, :data:`_SLO_HEADROOM`, is for the floor's own spread: the same busy host measured
    it from 3.8 to 7 ms, and each trial is judged on it again after its load runs.
    """
    from automl.pipeline.serving_floor import MAX_FLOOR_SHARE

    least = floor_p99_ms / MAX_FLOOR_SHARE * _SLO_HEADROOM
    scale = 10.0 ** math.floor(math.log10(least))
    return next(step * scale for step in (1, 2, 5, 10) if step * scale >= least)
