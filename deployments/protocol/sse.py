"""Server-sent events framing, shared by every streaming route."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

SSE_DONE = b"data: [DONE]\n\n"
SSE_MEDIA_TYPE = "text/event-stream"
# Proxies (nginx) buffer responses unless told otherwise; streaming must not be buffered.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_data(payload: BaseModel | dict[str, Any] | str) -> bytes:
    """One `data:` event carrying a JSON payload (or a preformatted string)."""
    if isinstance(payload, BaseModel):
        text = payload.model_dump_json()
    elif isinstance(payload, str):
        text = payload
    else:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    # A data line must not contain a raw newline; JSON never does, plain strings might.
    lines = text.split("\n")
    return ("".join(f"data: {line}\n" for line in lines) + "\n").encode()


def sse_event(payload: dict[str, Any]) -> bytes:
    """An event named by its payload's `type` (`event: <type>` then its data), as the Responses
    API and Anthropic's Messages API stream them."""
    return f"event: {payload['type']}\n".encode() + sse_data(payload)


# Stands for the one string an `SSEFrame` varies; no model output contains NUL characters.
HOLE = "\x00ominix:hole\x00"
_HOLE_JSON = to_json(HOLE)


class SSEFrame:
    """The `data:` events of one payload shape in which only one string changes (a stream's
    text deltas), built with `sse_data` once and then only that string encoded per event:
    `SSEFrame(payload)(text)` is `sse_data(payload with HOLE replaced by text)`, byte for byte
    (the same pydantic JSON encoder), without building and dumping the models each time. A
    token stream sends one event per token; on a cheap model this framing was a visible share
    of the ingress's CPU time per token (docs/performance.md, "Serving overhead")."""

    def __init__(self, payload: BaseModel | dict[str, Any]):
        head, hole, tail = sse_data(payload).partition(_HOLE_JSON)
        if not hole or _HOLE_JSON in tail:
            raise ValueError("the payload must hold HOLE exactly once, as a string value")
        self._head, self._tail = head, tail

    def __call__(self, text: str) -> bytes:
        return self._head + to_json(text) + self._tail
