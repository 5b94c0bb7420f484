"""The browser pages the ingress serves, all of them offline (nothing is loaded from a CDN):
`/demo` (plain HTML, JS and CSS in deployments/ingress/static/demo/, no build step) and the API
docs, `/docs` (Swagger UI) and `/redoc`, with their JavaScript and CSS from the fastapi-offline
package instead of FastAPI's default CDN links.

Pages are public (deployments/ingress/config.py): the requests they make carry the key typed
into them. Every URL is prefixed with the app's root path, so the pages work where Serve mounts
the app under a route prefix.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

from deployments import SERVICE_NAME
from deployments.protocol.errors import APIError

router = APIRouter(include_in_schema=False)

DEMO_DIR = Path(__file__).resolve().parent.parent / "static" / "demo"
DOCS_ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
# The page is rendered per request (root path); its files change only with a new version.
PAGE_HEADERS = {"Cache-Control": "no-cache"}


def with_bearer_auth(app: FastAPI) -> None:
    """Declare the API key in the OpenAPI schema (an HTTP bearer scheme on every route), so
    Swagger UI's "Authorize" takes the key and "Try it out" sends it."""
    schema_of = app.openapi

    def openapi() -> dict[str, Any]:
        schema = schema_of()  # built once, then cached by FastAPI
        if "security" not in schema:
            schema.setdefault("components", {})["securitySchemes"] = {"apiKey": {"type": "http", "scheme": "bearer"}}
            schema["security"] = [{"apiKey": []}, {}]  # {}: keyless servers need none
        return schema

    app.openapi = openapi


def _root(request: Request) -> str:
    return request.scope.get("root_path", "").rstrip("/")


def _static(directory: Path, name: str, allowed: tuple[str, ...]) -> FileResponse:
    if name not in allowed:
        raise APIError(404, f"No such file: {name}", "invalid_request_error", None, "not_found")
    return FileResponse(directory / name, headers=PAGE_HEADERS)


def _docs_dir() -> Path:
    return Path(str(resources.files("fastapi_offline") / "static"))


@router.get("/demo")
async def demo(request: Request) -> HTMLResponse:
    html = (DEMO_DIR / "index.html").read_text(encoding="utf-8").replace("__ROOT__", _root(request))
    return HTMLResponse(html, headers=PAGE_HEADERS)


@router.get("/demo/{name}")
async def demo_file(name: str) -> FileResponse:
    return _static(DEMO_DIR, name, tuple(p.name for p in DEMO_DIR.iterdir() if p.name != "index.html"))


def _docs_page(request: Request) -> tuple[str, dict[str, str]]:
    """Where a docs page's files are (under the root path), and the fields both pages share."""
    assets = f"{_root(request)}/docs/assets"
    common = {"openapi_url": f"{_root(request)}{request.app.openapi_url}", "title": f"{SERVICE_NAME} - API"}
    return assets, common


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    assets, common = _docs_page(request)
    return get_swagger_ui_html(
        **common,
        swagger_js_url=f"{assets}/swagger-ui-bundle.js",
        swagger_css_url=f"{assets}/swagger-ui.css",
        swagger_favicon_url=f"{assets}/favicon.png",
        oauth2_redirect_url=f"{_root(request)}/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    assets, common = _docs_page(request)
    return get_redoc_html(
        **common,
        redoc_js_url=f"{assets}/redoc.standalone.js",
        redoc_favicon_url=f"{assets}/favicon.png",
        with_google_fonts=False,
    )


@router.get("/docs/assets/{name}")
async def docs_asset(name: str) -> FileResponse:
    return _static(_docs_dir(), name, DOCS_ASSETS)
