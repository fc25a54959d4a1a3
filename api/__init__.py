"""The automl REST service: a thin FastAPI layer over ``automl.service``.

``create_app`` is imported on first use, so that ``automl serve``'s command can be registered
without loading FastAPI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from api.main import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":
        from api.main import create_app

        return create_app
    raise AttributeError(f"module 'api' has no attribute {name!r}")
