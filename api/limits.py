"""Request size limits: declared (Content-Length) and streamed bodies over the cap get 413.

A file upload (``PUT /v1/files/{name}``) has a cap of its own, ``AUTOML_DATA_MAX_MB``: the most
memory a load of a dataset may take, which no file that a study can load exceeds. Every other
body has ``AUTOML_MAX_BODY_BYTES``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException

from api.errors import error_response

if TYPE_CHECKING:
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

UPLOAD_PREFIX = "/v1/files/"


@dataclass(frozen=True)
class Cap:
    """The most bytes a body may have, and the setting that says so."""

    max_bytes: int
    setting: str

    def message(self, what: str) -> str:
        """What a client is told when its body is over the cap."""
        return f"{what} over {self.max_bytes} bytes ({self.setting})"


class BodyLimitMiddleware:
    """Pure ASGI middleware that rejects request bodies over their cap: ``upload`` for a PUT
    under :data:`UPLOAD_PREFIX`, ``body`` for every other request."""

    def __init__(self, app: ASGIApp, body: Cap, upload: Cap) -> None:
        self.app = app
        self.body, self.upload = body, upload

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        uploading = scope["method"] == "PUT" and scope["path"].startswith(UPLOAD_PREFIX)
        cap, what = (self.upload, "file") if uploading else (self.body, "request body")
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap.max_bytes:
            await _too_large(cap.message(what))(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > cap.max_bytes:
                # FastAPI re-raises HTTPException from body reading; the handler answers 413.
                raise HTTPException(413, cap.message(what))
            return message

        await self.app(scope, limited, send)


def _too_large(message: str) -> JSONResponse:
    return error_response(413, "payload_too_large", message)
