"""Swagger UI at ``/docs`` and ReDoc at ``/redoc``, with their assets served by the service.

FastAPI's default pages load Swagger UI and ReDoc from a CDN, so on a machine without
internet access they are blank. :func:`install` serves the vendored copies in
``services/api/static/`` (versions and licences in its README) instead; the pages
then make no request beyond the service itself.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "install"]

#: the vendored Swagger UI and ReDoc files (installed as package data)
STATIC_DIR = Path(__file__).parent / "static"
STATIC_URL = "/static"


def install(app: FastAPI) -> None:
    """Mount the static files and add ``/docs``, its OAuth2 redirect, and ``/redoc``.

    Build the app with ``docs_url=None, redoc_url=None`` so these are the only ones.
    """
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")
    favicon = f"{STATIC_URL}/swagger-ui/favicon-32x32.png"
    oauth2_redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=root + (app.openapi_url or "/openapi.json"),
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + oauth2_redirect,
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=root + favicon,
            # no badge that sends the description to the public validator
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=root + (app.openapi_url or "/openapi.json"),
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{STATIC_URL}/redoc/redoc.standalone.js",
            redoc_favicon_url=root + favicon,
            with_google_fonts=False,
        )
