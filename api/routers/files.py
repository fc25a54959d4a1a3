"""``/v1/files``: upload a dataset or weights under the data root, for specs to name."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from api.deps import FileName, SettingsDep
from api.schemas import ErrorOut, FileOut
from api.uploads import store_upload

router = APIRouter(prefix="/files", tags=["files"])
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_UPLOAD = {
    200: {"model": FileOut, "description": "The same bytes were stored under this name already."},
    409: {"model": ErrorOut, "description": "The name holds another file: it is never replaced."},
    413: {"model": ErrorOut, "description": "The file is over AUTOML_DATA_MAX_MB."},
    422: {"model": ErrorOut, "description": "The name's suffix or the file's content is refused."},
    503: {"model": ErrorOut, "description": "The weights check could not run in time."},
    507: {"model": ErrorOut, "description": "The data root's disk is full."},
}


@router.put(
    "/{name}",
    status_code=201,
    responses=_UPLOAD,
    openapi_extra={
        "requestBody": {"required": True, "content": {"application/octet-stream": _BINARY}}
    },
)
async def upload(
    name: FileName, request: Request, response: Response, settings: SettingsDep
) -> FileOut:
    """Store the body, the file's bytes, as ``name`` under the data root, once it is checked
    as a study would load it; a spec then names it (``dataset`` or ``model.weights``).

    A stored file is never replaced: the same bytes again answer 200, other bytes 409.
    """
    stored = await store_upload(request.stream(), name, settings)
    response.status_code = 201 if stored.created else 200
    return FileOut(
        name=stored.name, kind=stored.kind, field=stored.field,
        size_bytes=stored.size_bytes, sha256=stored.sha256,
    )  # fmt: skip
