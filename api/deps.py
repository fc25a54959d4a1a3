"""FastAPI dependencies as ``Annotated`` aliases: app state, authentication, paging."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages import BaseStorage

from api.errors import ApiError
from api.rendering import RenderedFronts
from automl.service.read import StudySnapshots
from automl.settings import Settings

_bearer = HTTPBearer(auto_error=False, description="An API token from AUTOML_API_TOKENS.")
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
MAX_LIMIT = 500


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _storage(request: Request) -> BaseStorage:
    return request.app.state.storage


async def _artifact_store(request: Request) -> FileSystemArtifactStore:
    return request.app.state.artifact_store


async def _snapshots(request: Request) -> StudySnapshots:
    return request.app.state.snapshots


async def _fronts(request: Request) -> RenderedFronts:
    return request.app.state.fronts


async def authenticate(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Let a request with a configured token through; 401 without one, 403 with a wrong one."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "unauthorized", "missing bearer token (Authorization: Bearer …)",
            headers={"WWW-Authenticate": "Bearer"},
        )  # fmt: skip
    if not request.app.state.tokens.verify(credentials.credentials):
        raise ApiError(403, "forbidden", "the bearer token is not valid")


@dataclass(frozen=True)
class Page:
    """Offset paging parameters."""

    offset: int
    limit: int


async def _page(
    offset: Annotated[int, Query(ge=0, le=10**9, description="Items to skip.")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")] = 50,
) -> Page:
    return Page(offset=offset, limit=limit)


SettingsDep = Annotated[Settings, Depends(_settings)]
StorageDep = Annotated[BaseStorage, Depends(_storage)]
ArtifactStoreDep = Annotated[FileSystemArtifactStore, Depends(_artifact_store)]
SnapshotsDep = Annotated[StudySnapshots, Depends(_snapshots)]
RenderedFrontsDep = Annotated[RenderedFronts, Depends(_fronts)]
PageDep = Annotated[Page, Depends(_page)]
StudyName = Annotated[
    str, Path(pattern=NAME_PATTERN, description="The study's name.", examples=["example"])
]
FileName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN, description="The file's name under the data root: a dataset "
        "(.npz) or weights (.pt, .pth).", examples=["mine.npz"],
    ),
]  # fmt: skip
TrialNumber = Annotated[
    int, Path(ge=0, le=2**31 - 1, description="The trial's number.", examples=[0])
]
IdempotencyKey = Annotated[
    str | None,
    Header(alias="Idempotency-Key", min_length=1, max_length=255, description="Retry key."),
]
