"""The Responses API's WebSocket mode (Open Responses 2026-04-24, OpenAI's `responses.connect`):
what a client sends on the socket and the error envelope it gets back. Pure: no Ray, no HTTP;
the connection itself is deployments/ingress/serving/responses_socket.py.

A turn starts with `{"type": "response.create", ...}`, whose other fields are a Responses
request's; `stream`, `stream_options` and `background` are HTTP's and MUST NOT be sent (the
socket always streams, and a background response is polled over HTTP). Failures before a
response begins are `{"type": "error", "status", "error": {"type", "code", "message", "param"}}`
(the spec's WebSocketErrorEvent); after it began, the stream's own `error` and `response.failed`.
"""

from __future__ import annotations

import json
from typing import Any

from deployments.protocol.errors import APIError, invalid_request

CREATE = "response.create"
# A connection lasts at most this long, as the spec and OpenAI's WebSocket mode say.
CONNECTION_LIMIT_S = 60 * 60.0
# Fields of an HTTP request that a socket's response.create must not carry.
HTTP_ONLY_FIELDS = {
    "stream": "the WebSocket always streams its events; leave stream out",
    "stream_options": "stream options are HTTP's; leave stream_options out",
    "background": "background responses are created over HTTP and polled; leave background out",
}


def create_request(text: str) -> dict[str, Any]:
    """A client message as the Responses request body it carries; anything else is a 400."""
    try:
        message = json.loads(text)
    except ValueError:
        raise invalid_request("The message is not JSON: send a response.create event", None, "invalid_json") from None
    if not isinstance(message, dict):
        raise invalid_request("A message is a JSON object: send a response.create event", None, "invalid_event")
    kind = message.get("type")
    if kind != CREATE:
        raise invalid_request(
            f"type: {kind!r} is not a client event served here; start a turn with type response.create",
            "type",
            "unknown_event",
        )
    for field, why in HTTP_ONLY_FIELDS.items():
        if field in message:
            raise invalid_request(f"{field}: not sent on a WebSocket ({why})", field, "unsupported_parameter")
    body = {k: v for k, v in message.items() if k != "type"}
    return {**body, "stream": True}


def error_envelope(error: APIError) -> dict[str, Any]:
    """A failure before a response began, as the spec's WebSocketErrorEvent."""
    return {
        "type": "error",
        "status": error.status_code,
        "error": {
            "type": error.type,
            "code": error.code or error.type,
            "message": error.message,
            "param": error.param,
        },
    }


def connection_limit_reached() -> APIError:
    return APIError(
        400,
        f"This WebSocket reached its {int(CONNECTION_LIMIT_S // 60)}-minute limit; open a new connection "
        "(continue a stored response by its id, or send the whole input)",
        "invalid_request_error",
        None,
        "websocket_connection_limit_reached",
    )
