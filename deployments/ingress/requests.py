"""JSON request bodies as shell-built clients send them.

OminiX-API's README builds JSON in the shell: `-d "{\"file\": \"$AUDIO_B64\"}"` with
`AUDIO_B64=$(base64 -i audio.wav)`. On Linux, GNU base64 wraps its output every 76 columns, so
the JSON string holds raw newlines, which strict JSON (and Python's json.loads) refuses. Routes
that take base64 fields use this route class: it parses with `strict=False` (control characters
allowed inside strings; nothing else changes), and the base64 decoder skips the line breaks
(deployments/protocol/b64.py). FastAPI's documented custom Request/APIRoute pattern.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute


class LenientJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), strict=False)
        return self._json


class LenientJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def lenient(request: Request):
            return await handler(LenientJSONRequest(request.scope, request.receive))

        return lenient
