"""The one pre-flight of every way in: the CLI, the Python API and the REST service.

Every check runs on every spec before any study is created, so that a refused input leaves no
study behind. The callers choose the checks: the CLI and the Python API check here what the
trials will need (:func:`automl.fleet.preflight.prepare_studies`); the REST service checks the
trained model in a child process and leaves the rest to the workers that will run the study.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from automl.search.spec import StudySpec

Created = TypeVar("Created")


def preflight(
    specs: Sequence[StudySpec],
    checks: Sequence[Callable[[StudySpec], object]],
    create: Callable[[StudySpec], Created],
) -> list[Created]:
    """Run each of ``checks`` on every spec, in order, then ``create`` each study.

    Args:
        specs: One spec per study.
        checks: Each raises on a spec it refuses (``SpecError``, ``InputRefused``, an API
            error); what it returns is ignored.
        create: Creates (or finds) one study, once every check has passed for every spec.

    Returns:
        What ``create`` returned, per spec.
    """
    for check in checks:
        for spec in specs:
            check(spec)
    return [create(spec) for spec in specs]
