"""automl: hardware-aware model-optimization search.

``automl.optimize(...)`` runs a study here and returns a :class:`StudyResult`;
``automl.load(name)`` reopens one. They are imported on first use, so that ``import automl``
(and the ``automl`` command's start) loads neither torch nor the study loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automl.python_api import load, optimize
    from automl.study_result import StudyResult

__version__ = "0.1.0"
__all__ = ["StudyResult", "__version__", "load", "optimize"]

_LAZY = {
    "optimize": "automl.python_api",
    "load": "automl.python_api",
    "StudyResult": "automl.study_result",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'automl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
