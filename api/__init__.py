"""The automl REST service: a thin FastAPI layer over ``automl.studies``."""

from __future__ import annotations

from api.main import create_app

__all__ = ["create_app"]
