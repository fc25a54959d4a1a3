"""Errors as JSON: a stable ``code``, a human ``message`` and, for 422, the bad fields.

Every message that leaves the API, error bodies and the studies' and trials' recorded failure
reasons alike, goes through :func:`scrub_paths`: engines name files by their full paths for the
CLI's user, who owns the machine, but a client of the server must not learn its folders.
"""

from __future__ import annotations

import logging
import re
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from optuna.artifacts.exceptions import ArtifactNotFound
from starlette.exceptions import HTTPException
from starlette.routing import Match

from automl.errors import SpecError
from automl.service.exports import ModelMissing
from automl.service.studies import StudyNotFound, TrialNotFound
from automl.service.submissions import KeyReused, StudyConflict

if TYPE_CHECKING:
    from pathlib import Path

    from fastapi import FastAPI, Request

logger = logging.getLogger("api")
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}
# Pydantic's error types for a body that is no JSON object: another type, form data, or none.
_NO_OBJECT = ("model_attributes_type", "dict_type", "missing")
# An absolute path: quoted (spaces allowed), or bare up to a space, quote or bracket. A slash
# after a word, a dot, a colon or a slash is inside a relative path or a URL; one before a
# space or a symbol ("ms / sample", "/*") begins no path.
_PATH = re.compile(
    r"""(?P<quote>['"])(?P<quoted>/[^'"\n]+)(?P=quote)"""
    r"""|(?<![\w.:/<~-])(?P<bare>/[\w.~-][^\s'"`,;:()<>\[\]{}]*)"""
)
_METHOD_BEFORE = re.compile(r"\b(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) $")
_API_PATHS = ("/v1/", "/healthz", "/docs", "/redoc", "/openapi.json")
DATA_ROOT_SHOWN = "<data root>"


def scrub_paths(text: str, data_root: Path | None = None) -> str:
    """``text`` without the server's absolute paths, for a client.

    A path under ``data_root`` is shown relative to it (as a client names files there), the
    data root itself as ``<data root>``, and any other absolute path (a temporary copy, a
    worker's folder) by its file name alone. This API's own routes (``GET /v1/...``) stay.
    """
    if not _PATH.search(text):
        return text
    roots = (
        [] if data_root is None else [PurePosixPath(data_root), PurePosixPath(data_root.resolve())]
    )

    def shown(match: re.Match[str]) -> str:
        quote, path = match["quote"] or "", match["quoted"] or match["bare"]
        stop = "" if quote else path[len(path.rstrip(".")) :]  # a sentence's full stop
        path = path[: len(path) - len(stop)]
        before = match.string[max(match.start() - 8, 0) : match.start()]
        if path.startswith(_API_PATHS) or _METHOD_BEFORE.search(before):
            return match[0]
        return f"{quote}{_shown(PurePosixPath(path), roots)}{quote}{stop}"

    return _PATH.sub(shown, text)


def _shown(path: PurePosixPath, roots: list[PurePosixPath]) -> str:
    for root in roots:
        if path == root:
            return DATA_ROOT_SHOWN
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return path.name or str(path)


class ApiError(Exception):
    """An error meant for the client: HTTP status, stable code, message and optional field."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers


def error_response(
    status: int,
    code: str,
    message: str,
    errors: list[dict] | None = None,
    headers: dict[str, str] | None = None,
    *,
    data_root: Path | None = None,
) -> JSONResponse:
    """The JSON body every error has; its messages name no absolute path (see
    :func:`scrub_paths`, to which ``data_root`` goes)."""
    body: dict = {"code": code, "message": scrub_paths(message, data_root)}
    if errors is not None:
        body["errors"] = [{**e, "message": scrub_paths(e["message"], data_root)} for e in errors]
    return JSONResponse(body, status_code=status, headers=headers)


def _data_root(request: Request) -> Path | None:
    """The data root of the app that serves ``request``."""
    settings = getattr(request.app.state, "settings", None)
    return None if settings is None else settings.data_root


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    errors = [{"field": exc.field, "message": exc.message}] if exc.field else None
    return error_response(
        exc.status, exc.code, exc.message, errors, exc.headers, data_root=_data_root(request)
    )


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    broken = [item for item in exc.errors() if item["type"] == "json_invalid"]
    if broken:  # FastAPI reports it as a field named by the character offset
        error = broken[0]
        where = error["loc"][-1] if len(error["loc"]) > 1 else "?"
        detail = error.get("ctx", {}).get("error", error["msg"])
        return error_response(
            400,
            "bad_request",
            f"the body is not valid JSON: {detail} (at character {where})",
            data_root=_data_root(request),
        )
    errors = []
    for item in exc.errors():
        where, *path = item["loc"] or ("body",)
        field = ".".join(str(p) for p in path) or "(body)"
        errors.append({"field": field, "in": where, "message": item["msg"]})
    summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    if any(item["loc"] == ("body",) and item["type"] in _NO_OBJECT for item in exc.errors()):
        summary += "; send one JSON object, with Content-Type: application/json"
    return error_response(
        422,
        "invalid_request",
        f"invalid request: {summary}",
        errors,
        data_root=_data_root(request),
    )


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


async def _http(request: Request, exc: HTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):
        message = f"{message.lower()}: {request.method} {request.url.path}"
    headers = exc.headers
    if exc.status_code == 405:  # Starlette names the methods of one of the path's routes only
        headers = {**(headers or {}), "Allow": _allowed(request)}
    return error_response(
        exc.status_code, code, message, headers=headers, data_root=_data_root(request)
    )


def _allowed(request: Request) -> str:
    """Every method that some route of the request's path answers in full."""
    routes = request.app.router.routes
    return ", ".join(
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] == Match.FULL for r in routes)
    )


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, ModelMissing):  # its message is the operator's: which setting to fix
        return await _artifact_missing(request, exc)
    if isinstance(exc, StudyNotFound):
        message = f"no study named {exc.args[0]!r}; GET /v1/studies lists the existing ones"
        return error_response(404, "study_not_found", message)
    return error_response(404, "trial_not_found", str(exc), data_root=_data_root(request))


async def _artifact_missing(_request: Request, _exc: Exception) -> JSONResponse:
    message = "the trial's model file is missing or is not a file"
    return error_response(404, "model_not_found", message)


async def _conflict(request: Request, exc: StudyConflict) -> JSONResponse:
    return error_response(409, "conflict", str(exc), data_root=_data_root(request))


async def _key_reused(request: Request, exc: KeyReused) -> JSONResponse:
    errors = [{"field": "Idempotency-Key", "in": "header", "message": str(exc)}]
    return error_response(
        422, "idempotency_key_reused", str(exc), errors, data_root=_data_root(request)
    )


async def _spec(request: Request, exc: SpecError) -> JSONResponse:
    return error_response(422, "invalid_spec", str(exc), data_root=_data_root(request))


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    logger.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error; see the server log")


def install_error_handlers(app: FastAPI) -> None:
    """Register the JSON error handlers on ``app``."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(HTTPException, _http)
    app.add_exception_handler(StudyNotFound, _not_found)
    app.add_exception_handler(TrialNotFound, _not_found)
    app.add_exception_handler(ArtifactNotFound, _artifact_missing)
    app.add_exception_handler(StudyConflict, _conflict)
    app.add_exception_handler(KeyReused, _key_reused)
    app.add_exception_handler(SpecError, _spec)
    app.add_exception_handler(Exception, _internal)
