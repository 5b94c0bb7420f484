"""The pages the ingress serves to browsers: /demo and the API docs, with every file they load
served by the ingress itself (no CDN), public and exempt from the connection cap."""

import re

import httpx
import pytest

from deployments.ingress.app import create_app
from deployments.ingress.config import IngressSettings, is_public, is_uncapped
from graphs.config import GraphArgs
from tests.ingress.conftest import default_slots, ingress_state, shipped_args


def loaded_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)=["\']([^"\']+)["\']', html) + re.findall(r"url: ?'([^']+)'", html)


@pytest.fixture
def keyed_app(tmp_path):
    args = shipped_args(cache_dir=str(tmp_path), security={"api_keys": ["k1"]})
    return create_app(ingress_state(GraphArgs.from_args(args, environ={}), default_slots()))


async def test_the_demo_page_and_its_files_are_served_by_the_ingress(http):
    r = await http.get("/demo")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<base href="/">' in r.text
    for url in loaded_urls(r.text):
        assert not url.startswith(("http:", "https:", "//")), url  # nothing from elsewhere
    for name in ("demo/demo.js", "demo/demo.css"):
        asset = await http.get(f"/{name}")
        assert asset.status_code == 200 and len(asset.content) > 1000
    assert (await http.get("/demo/index.html")).status_code == 404
    assert (await http.get("/demo/..%2Fpages.py")).status_code == 404


async def test_the_demo_page_follows_the_apps_route_prefix(app):
    transport = httpx.ASGITransport(app=app, root_path="/keyed")
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/keyed/demo")
    assert '<base href="/keyed/">' in r.text


async def test_docs_load_swagger_ui_and_redoc_from_the_graph(http):
    for page, assets in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")), ("/redoc", ("redoc.standalone.js",))):
        html = (await http.get(page)).text
        urls = loaded_urls(html)
        assert all(not u.startswith(("http:", "https:", "//")) for u in urls), urls
        assert "fonts.googleapis" not in html and "cdn" not in html
        for name in assets:
            assert f"/docs/assets/{name}" in urls
            r = await http.get(f"/docs/assets/{name}")
            assert r.status_code == 200 and len(r.content) > 100_000
    assert "/openapi.json" in (await http.get("/docs")).text
    assert (await http.get("/docs/assets/nothing.js")).status_code == 404


async def test_pages_are_public_with_keys_set_and_the_api_is_not(keyed_app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=keyed_app), base_url="http://t") as c:
        for path in ("/demo", "/demo/demo.js", "/docs", "/docs/assets/swagger-ui.css", "/redoc", "/openapi.json"):
            assert (await c.get(path)).status_code == 200, path
        assert (await c.get("/v1/models")).status_code == 401
        assert (await c.post("/v1/agent/stream", json={"input": "hi"})).status_code == 401


def test_public_and_uncapped_paths_are_exact_or_under_a_page():
    assert is_public("/demo") and is_public("/demo/demo.js") and is_public("/docs/assets/swagger-ui.css")
    assert not is_public("/demonstration") and not is_public("/docs/other") and not is_public("/v1/models")
    assert is_uncapped("/demo") and is_uncapped("/demo/demo.css") and is_uncapped("/health")
    assert not is_uncapped("/docs") and not is_uncapped("/v1/agent/stream")
    assert IngressSettings().policy_for("/v1/agent/stream").timeout_s == 600.0


async def test_the_schema_declares_the_bearer_key_for_swagger_uis_authorize(http):
    schema = (await http.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["apiKey"] == {"type": "http", "scheme": "bearer"}
    assert {"apiKey": []} in schema["security"] and "/v1/agent/stream" in schema["paths"]
