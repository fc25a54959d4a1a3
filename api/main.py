"""The app factory: routers under ``/v1``, bearer auth, JSON errors and a body-size limit."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import Depends, FastAPI

from api.deps import authenticate
from api.errors import install_error_handlers
from api.limits import BodyLimitMiddleware, Cap
from api.openapi import openapi_schema
from api.rendering import RenderedFronts
from api.routers import docs, files, health, search_spaces, studies, targets, trials
from api.schemas import ErrorOut
from api.security import TokenVerifier
from automl.service.read import StudySnapshots
from automl.storage.factory import cached, open_artifact_store, open_storage
from automl.storage.reaper import Reaper

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from optuna.artifacts import FileSystemArtifactStore
    from optuna.storages import BaseStorage

    from automl.settings import Settings

_AUTH_ERRORS = {
    401: {"model": ErrorOut, "description": "No bearer token."},
    403: {"model": ErrorOut, "description": "Wrong bearer token."},
    422: {"model": ErrorOut, "description": "Invalid input; `errors` names the fields."},
}


@asynccontextmanager
async def _reaping(app: FastAPI) -> AsyncIterator[None]:
    """Fail stale trials of dead workers even when no worker is starting new trials."""
    interval = max(app.state.settings.grace_period_s / 2, 1.0)
    reaper = Reaper(app.state.storage, interval).start()
    try:
        yield
    finally:
        reaper.stop()


def create_app(
    settings: Settings,
    storage: BaseStorage | None = None,
    artifact_store: FileSystemArtifactStore | None = None,
) -> FastAPI:
    """Build the API. It reads and writes studies; workers run them, never this process.

    Args:
        settings: Tokens, caps, data root and, unless given below, storage and artifacts.
        storage: The study storage; defaults to ``settings.storage``.
        artifact_store: Where trial models are; defaults to ``settings.artifacts_dir``.

    Raises:
        SpecError: No API token is configured outside dev mode.
    """
    app = FastAPI(
        lifespan=_reaping,
        title="automl",
        version="1",
        description="Submit hardware-aware model searches, follow them, fetch fronts and models.",
        docs_url=None,  # served by api.routers.docs from installed files, not from a CDN
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.tokens = TokenVerifier.from_settings(settings)
    app.state.storage = cached(storage or open_storage(settings.storage, settings))
    app.state.artifact_store = artifact_store or open_artifact_store(settings)
    app.state.snapshots = StudySnapshots()
    app.state.fronts = RenderedFronts()
    install_error_handlers(app)
    app.add_middleware(
        BodyLimitMiddleware,
        body=Cap(settings.max_body_bytes, "AUTOML_MAX_BODY_BYTES"),
        upload=Cap(int(settings.data_max_mb * 1e6), "AUTOML_DATA_MAX_MB"),
    )
    app.include_router(health.router)
    app.include_router(docs.router)
    docs.mount_assets(app)
    for module in (studies, trials, files, targets, search_spaces):
        app.include_router(
            module.router, prefix="/v1", dependencies=[Depends(authenticate)],
            responses=_AUTH_ERRORS,
        )  # fmt: skip
    app.openapi = lambda: openapi_schema(app)
    return app
