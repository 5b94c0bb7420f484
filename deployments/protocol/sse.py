"""Server-sent events framing, shared by every streaming route."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

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
