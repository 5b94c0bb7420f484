"""ASGI middleware that makes the ingress safe to expose: API keys, a connection cap, body
size caps enforced while reading, per-route timeouts, CORS.

Pure ASGI (no Ray): each middleware gets a `settings()` callable, so the FastAPI app can be
built once at import and still enforce the settings the running replica was bound with.
Rejections are OpenAI-shaped JSON for HTTP (Anthropic-shaped on Anthropic's routes), and for a WebSocket the same status and body as
the answer to its upgrade request (ASGI's WebSocket denial response; Serve's proxy runs
uvicorn, which supports it), or a close before accept (HTTP 403) on servers without it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Optional

from deployments.ingress.config import IngressSettings, is_public, is_uncapped
from deployments.ingress.errors import error_body_for
from deployments.protocol.errors import APIError

logger = logging.getLogger("ray.serve")

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
SettingsProvider = Callable[[], IngressSettings]

# Browsers cannot set headers on a WebSocket: they offer ["bearer", "<key>"] as subprotocols.
WS_BEARER_PROTOCOL = "bearer"


async def send_error(scope: dict, send: Callable, error: APIError, headers: Optional[dict] = None) -> None:
    body = json.dumps(error_body_for(route_path(scope), error)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    kind = "http"
    if scope["type"] == "websocket":
        if "websocket.http.response" not in (scope.get("extensions") or {}):
            # A server without the denial extension: closing before accept answers the
            # handshake with a bare HTTP 403.
            await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
            return
        kind = "websocket.http"  # deny the upgrade with the same status and body as HTTP
    await send({"type": f"{kind}.response.start", "status": error.status_code, "headers": raw_headers})
    await send({"type": f"{kind}.response.body", "body": body})


def _header(scope: dict, name: bytes) -> Optional[str]:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def route_path(scope: dict) -> str:
    """The path inside this app: Serve mounts apps under a route prefix (the ASGI root_path)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root) :] or "/" if root and path.startswith(root) else path


def presented_key(scope: dict) -> Optional[str]:
    """`Authorization: Bearer <key>` (OpenAI's clients), else `x-api-key` (Anthropic's)."""
    auth = _header(scope, b"authorization")
    if auth and auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    api_key = _header(scope, b"x-api-key")
    if api_key:
        return api_key.strip()
    if scope["type"] == "websocket":
        offered = [p.strip() for p in scope.get("subprotocols", [])]
        if len(offered) >= 2 and offered[0] == WS_BEARER_PROTOCOL:
            return offered[1]
    return None


class ApiKeyAuth:
    def __init__(self, app: ASGIApp, settings: SettingsProvider):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        settings = self.settings()
        if not settings.auth_required or is_public(route_path(scope)) or scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        key = presented_key(scope)
        if key is None or not settings.key_is_valid(key):
            error = APIError(401, "invalid api key", "authentication_error", code="invalid_api_key")
            return await send_error(scope, send, error, {"WWW-Authenticate": "Bearer"})
        if (
            scope["type"] == "websocket"
            and _header(scope, b"authorization") is None
            and not _header(scope, b"x-api-key")
        ):
            send = _accept_with_subprotocol(send, WS_BEARER_PROTOCOL)
        return await self.app(scope, receive, send)


def _accept_with_subprotocol(send: Callable, protocol: str) -> Callable:
    """A browser that offered a subprotocol must get one back, or it drops the socket."""

    async def wrapped(message):
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": protocol}
        await send(message)

    return wrapped


class ConcurrencyLimit:
    """At most N requests in flight through this ingress replica; beyond that, 429."""

    def __init__(self, app: ASGIApp, settings: SettingsProvider):
        self.app, self.settings = app, settings
        self.in_flight = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket") or is_uncapped(route_path(scope)):
            return await self.app(scope, receive, send)
        if self.in_flight >= self.settings().max_concurrent_requests:
            error = APIError(
                429, "Too many concurrent requests; retry shortly", "rate_limit_error", code="too_many_requests"
            )
            return await send_error(scope, send, error, {"Retry-After": "2"})
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


class BodySizeLimit:
    """413 for bodies over the route's cap: from Content-Length when given, else while reading
    (chunked uploads are cut off at the cap, never buffered whole)."""

    def __init__(self, app: ASGIApp, settings: SettingsProvider):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.settings().policy_for(route_path(scope)).max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await send_error(scope, send, _too_large(limit))
        received = 0
        started = rejected = False

        async def counting_receive():
            nonlocal received, rejected
            if rejected:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit and not started:
                    # Answer now; the app sees a disconnect and whatever it sends is dropped.
                    rejected = True
                    await send_error(scope, send, _too_large(limit))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            nonlocal started
            if rejected:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not rejected:
                raise


def _too_large(limit: int) -> APIError:
    return APIError(
        413,
        f"Request body is larger than this route's limit of {limit} bytes",
        "invalid_request_error",
        code="request_too_large",
    )


class RouteTimeout:
    """Cancel a request that runs past its route's timeout (the slot work is cancelled with it)."""

    def __init__(self, app: ASGIApp, settings: SettingsProvider):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        timeout = self.settings().policy_for(route_path(scope)).timeout_s
        if timeout is None:
            return await self.app(scope, receive, send)
        started = finished = False

        async def tracking_send(message):
            nonlocal started, finished
            started = started or message["type"] == "http.response.start"
            finished = message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        try:
            await asyncio.wait_for(self.app(scope, receive, tracking_send), timeout)
        except TimeoutError:
            logger.warning("%s %s timed out after %.0fs", scope.get("method"), scope["path"], timeout)
            if not started:
                error = APIError(
                    504, f"The request did not finish within {timeout:.0f} s", "timeout_error", code="timeout"
                )
                await send_error(scope, send, error)
            elif not finished:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


class DynamicCORS:
    """Starlette's CORS middleware, configured from the replica's settings on first use."""

    def __init__(self, app: ASGIApp, settings: SettingsProvider):
        self.app, self.settings = app, settings
        self._inner: Optional[Any] = None

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):  # lifespan runs before settings exist
            return await self.app(scope, receive, send)
        if self._inner is None:
            from starlette.middleware.cors import CORSMiddleware

            origins = self.settings().cors_origins
            self._inner = (
                CORSMiddleware(self.app, allow_origins=origins, allow_methods=["*"], allow_headers=["*"])
                if origins
                else self.app
            )
        await self._inner(scope, receive, send)
