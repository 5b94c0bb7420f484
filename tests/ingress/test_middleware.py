"""The ingress's protective middleware on a small ASGI app: auth, cap, body size, timeout, CORS."""

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse

from deployments.ingress.config import IngressSettings, RoutePolicy, hash_key
from deployments.ingress.middleware import (
    ApiKeyAuth,
    BodySizeLimit,
    ConcurrencyLimit,
    DynamicCORS,
    RouteTimeout,
)

release = asyncio.Event()


async def echo(request):
    body = await request.body()
    return JSONResponse({"bytes": len(body)})


async def slow(request):
    await asyncio.sleep(5)
    return PlainTextResponse("late")


class SilentSlot:
    """A deployment's response stream whose first chunk never comes (a long queue in the slot)."""

    cancelled = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.Event().wait()

    def cancel(self):
        SilentSlot.cancelled = True


async def slow_stream(request):
    from deployments.ingress.clients import SlotStream

    await SlotStream.start(SilentSlot())
    return PlainTextResponse("late")


async def wait(request):
    await release.wait()
    return PlainTextResponse("done")


async def health(request):
    return PlainTextResponse("ok")


async def ws(websocket):
    await websocket.accept()
    await websocket.send_text("hello")
    await websocket.close()


def make_app(**overrides):
    settings = IngressSettings(
        api_key_hashes=[hash_key("k1"), hash_key("k2")],
        max_concurrent_requests=2,
        routes=[
            RoutePolicy(prefix="/slow", max_body_bytes=100, timeout_s=0.3),
            RoutePolicy(prefix="", max_body_bytes=100, timeout_s=10),
        ],
        **overrides,
    )
    app = Starlette(
        routes=[
            Route("/echo", echo, methods=["POST"]),
            Route("/slow", slow),
            Route("/slow-stream", slow_stream),
            Route("/wait", wait),
            Route("/health", health),
            WebSocketRoute("/ws", ws),
        ]
    )
    for middleware in (RouteTimeout, BodySizeLimit, ConcurrencyLimit, ApiKeyAuth, DynamicCORS):
        app.add_middleware(middleware, settings=lambda: settings)
    return app


def client(app, key="k1"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers)


def assert_error(r, status, type_):
    assert r.status_code == status
    assert r.json()["error"]["type"] == type_ and r.json()["error"]["message"]


async def test_missing_or_wrong_key_is_401_and_health_is_public():
    app = make_app()
    async with client(app, key=None) as c:
        assert_error(await c.post("/echo", content=b"x"), 401, "authentication_error")
        assert (await c.get("/health")).status_code == 200
    async with client(app, key="wrong") as c:
        r = await c.post("/echo", content=b"x")
        assert_error(r, 401, "authentication_error")
        assert "wrong" not in r.text
    async with client(app, key="k2") as c:
        assert (await c.post("/echo", content=b"x")).json() == {"bytes": 1}


async def test_body_over_the_cap_is_413_declared_or_streamed():
    async with client(make_app()) as c:
        assert (await c.post("/echo", content=b"x" * 100)).status_code == 200
        assert_error(await c.post("/echo", content=b"x" * 101), 413, "invalid_request_error")

        async def chunks():  # no Content-Length: counted while reading
            for _ in range(50):
                yield b"x" * 10

        assert_error(await c.post("/echo", content=chunks()), 413, "invalid_request_error")


async def test_route_timeout_is_504():
    async with client(make_app()) as c:
        assert_error(await c.get("/slow"), 504, "timeout_error")


async def test_a_slot_stream_still_waiting_at_the_timeout_is_a_504_and_is_cancelled():
    """The timeout's cancellation reaches the ingress while it waits for a slot's first chunk:
    it must stay a cancellation (a 504 here), not become a 500 "CancelledError"."""
    SilentSlot.cancelled = False
    async with client(make_app()) as c:
        assert_error(await c.get("/slow-stream"), 504, "timeout_error")
    assert SilentSlot.cancelled  # the call in the deployment is stopped too


async def test_requests_beyond_the_cap_get_429_with_retry_after():
    release.clear()
    app = make_app()
    async with client(app) as c:
        waiting = [asyncio.create_task(c.get("/wait")) for _ in range(2)]
        await asyncio.sleep(0.2)
        r = await c.get("/wait")
        assert_error(r, 429, "rate_limit_error")
        assert r.headers["retry-after"] == "2"
        assert (await c.get("/health")).status_code == 200  # probes are never capped
        release.set()
        assert [(await t).status_code for t in waiting] == [200, 200]


def test_websocket_auth_by_header_or_bearer_subprotocol():
    tc = TestClient(make_app())
    for bad in ({}, {"headers": {"Authorization": "Bearer nope"}}, {"subprotocols": ["bearer", "nope"]}):
        with pytest.raises(WebSocketDenialResponse) as info:  # the upgrade is answered like HTTP
            with tc.websocket_connect("/ws", **bad):
                pass
        assert info.value.status_code == 401 and info.value.headers["www-authenticate"] == "Bearer"
        assert info.value.json()["error"]["code"] == "invalid_api_key"
    with tc.websocket_connect("/ws", headers={"Authorization": "Bearer k1"}) as s:
        assert s.receive_text() == "hello"
    with tc.websocket_connect("/ws", subprotocols=["bearer", "k2"]) as s:
        assert s.accepted_subprotocol == "bearer"
        assert s.receive_text() == "hello"


async def test_cors_only_for_configured_origins():
    async with client(make_app(cors_origins=["http://ok.example"])) as c:
        r = await c.get("/health", headers={"Origin": "http://ok.example"})
        assert r.headers["access-control-allow-origin"] == "http://ok.example"
        r = await c.get("/health", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in r.headers
    async with client(make_app()) as c:  # no origins configured: no CORS headers at all
        r = await c.get("/health", headers={"Origin": "http://ok.example"})
        assert "access-control-allow-origin" not in r.headers


async def test_websocket_rejection_without_the_denial_extension_closes_before_accept():
    from deployments.ingress.middleware import send_error
    from deployments.protocol.errors import APIError

    sent = []

    async def send(message):
        sent.append(message)

    error = APIError(401, "invalid api key", "authentication_error")
    await send_error({"type": "websocket", "extensions": {}}, send, error)
    assert sent == [{"type": "websocket.close", "code": 1008, "reason": "invalid api key"}]
