"""``/docs`` without internet: Swagger UI served from this server.

The assets (Swagger UI 5, which renders the OpenAPI 3.1 documents FastAPI
writes) come from the ``fastapi-offline`` package, installed with
``spanedge[hub]``; nothing is vendored here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

#: Where the Swagger UI assets are mounted.
ASSETS_PATH = "/docs-assets"

#: The files ``/docs`` loads, all under :data:`ASSETS_PATH`.
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon.png")


def swagger_ui_dir() -> Path:
    """The directory that holds Swagger UI's files (see :data:`ASSETS`).

    Raises:
        MissingExtra: ``fastapi-offline`` is not installed (it comes with ``spanedge[hub]``).
    """
    try:
        folder = resources.files("fastapi_offline") / "static"
    except ModuleNotFoundError:
        from spanedge.errors import MissingExtra

        module = "fastapi_offline"
        raise MissingExtra(module, "hub") from None
    return Path(str(folder))


def offline_docs(app: FastAPI, *, title: str | None = None) -> None:
    """Serve ``/docs`` with Swagger UI's JavaScript, CSS and icon from ``app`` itself.

    Create ``app`` with ``docs_url=None`` and ``redoc_url=None`` (FastAPI's own pages
    load their scripts from a CDN), then call this.

    Args:
        app: the FastAPI application.
        title: the page title; ``"<the API's title> API"`` by default.

    Raises:
        MissingExtra: ``fastapi-offline`` is not installed.
    """
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount(ASSETS_PATH, StaticFiles(directory=swagger_ui_dir()), name="docs-assets")
    page_title = title or f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=page_title,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
            # no badge from the public validator service: it would send the spec's address elsewhere
            swagger_ui_parameters={"validatorUrl": None},
        )
