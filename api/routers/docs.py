"""``/docs`` and ``/redoc``: the OpenAPI viewers, with their scripts, styles and icon served by
this API from the installed ``fastapi-offline`` package.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, and ReDoc its fonts from Google: on
a host that cannot reach them, both pages stay blank. Here every asset comes from
``/docs/assets``, and ReDoc uses the browser's fonts.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

if TYPE_CHECKING:
    from fastapi import FastAPI

ASSETS_URL = "/docs/assets"
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"
# The pages may load from this API only: ReDoc's sidebar shows a logo from its vendor's CDN,
# which the browser then does not ask for. Each page starts its viewer in an inline script, the
# viewers add inline styles, and ReDoc's search runs in a worker it builds from a blob.
SAME_ORIGIN_ONLY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "worker-src 'self' blob:",
    )
)

router = APIRouter(include_in_schema=False)


def mount_assets(app: FastAPI) -> None:
    """Serve the viewers' files (Swagger UI 5, ReDoc 2, an icon) under :data:`ASSETS_URL`."""
    folder = resources.files("fastapi_offline") / "static"
    app.mount(ASSETS_URL, StaticFiles(directory=str(folder)), name="docs-assets")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI over this API's OpenAPI document."""
    root = request.scope.get("root_path", "")
    page = get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        oauth2_redirect_url=f"{root}{OAUTH2_REDIRECT_URL}",
        swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
    )
    return _same_origin_only(page)


@router.get(OAUTH2_REDIRECT_URL)
async def swagger_ui_redirect() -> HTMLResponse:
    """The page Swagger UI's OAuth2 flow returns to."""
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc over this API's OpenAPI document, in the browser's own fonts."""
    root = request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
        with_google_fonts=False,
    )
    return _same_origin_only(page)


def _same_origin_only(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = SAME_ORIGIN_ONLY
    return page
