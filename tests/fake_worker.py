"""A fake OminiX-SGLang worker-v0 shim: the real HTTP/SSE protocol on a real loopback socket.

It stands in for the remote CUDA host (a system outside this project). It answers the four
shim endpoints with bearer-token auth, records what it received (generate envelopes, aborts),
and has one switch per failure the proxy must handle, so tests can flip it between requests:

    worker.behaviour = "missing_done"      # see BEHAVIOURS
    worker.generate_status = 429           # /generate answers this status instead
    worker.stop()                          # the worker goes down (connection refused)

Runs uvicorn in a background thread of the test process.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.loopback import LoopbackServer, free_port  # noqa: F401 (free_port: used by tests)

PROTOCOL = "ominix.worker.v0"
BEHAVIOURS = {
    "ok": "answers 'pong' (tokens 'po', 'ng'), finish_reason stop, usage, [DONE]",
    "fake_mode": "server_info says mode 'fake' (never a production shim)",
    "wrong_model": "get_model_info names another served model",
    "not_generation": "get_model_info says is_generation false",
    "probe_401": "the probes answer 401",
    "slow": "generate answers after `slow_s` seconds",
    "endless": "streams a token every 50 ms for `slow_s` seconds (client disconnect tests)",
    "json_content_type": "generate answers 200 application/json",
    "malformed_sse": "an event that is not JSON",
    "invalid_utf8": "a frame that is not UTF-8",
    "unterminated": "a last frame without its blank line",
    "missing_done": "done event, then the stream ends without [DONE]",
    "no_done_event": "tokens then [DONE] without a done event",
    "events_after_done": "a token event after done",
    "data_after_done_marker": "an event after [DONE]",
    "wrong_request_id": "events carry another request_id",
    "sequence_index": "events with sequence_index 1",
    "no_created_at": "events without created_at_ms",
    "error_event": "an error event",
    "abort_finish": "done with finish_reason abort",
    "tool_calls_finish": "done with finish_reason tool_calls",
    "unknown_kind": "an event of unknown kind",
    "redirect": "generate answers 307 to another URL",
}


class FakeWorker(LoopbackServer):
    name = "fake-worker"

    def __init__(self, token: str = "test-token", served_model: str = "Qwen/Qwen3-8B-served"):
        self.token = token
        self.served_model = served_model
        super().__init__()

    def reset(self) -> None:
        """Back to a healthy worker with empty records."""
        self.behaviour = "ok"
        self.generate_status: Optional[int] = None
        self.slow_s = 3.0
        self.generate_requests: list[dict[str, Any]] = []
        # Generate requests answered with an injected status or behaviour: the proxy aborts
        # each (it aborts all but a stream whose [DONE] it consumed cleanly).
        self.unclean: list[str] = []
        self.aborts: list[dict[str, Any]] = []
        self.unauthorized = 0
        self.streams_closed_early = 0

    def wait_for_abort(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.time() + timeout
        while not self.aborts and time.time() < deadline:
            time.sleep(0.02)
        return self.aborts

    # -- HTTP ------------------------------------------------------------------------------

    def _app(self) -> Starlette:
        routes = [
            Route("/server_info", self._server_info, methods=["GET"]),
            Route("/get_model_info", self._model_info, methods=["GET"]),
            Route("/generate", self._generate, methods=["POST"]),
            Route("/abort_request", self._abort, methods=["POST"]),
        ]
        return Starlette(routes=routes)

    def _authorized(self, request: Request) -> bool:
        ok = request.headers.get("authorization") == f"Bearer {self.token}"
        if not ok:
            self.unauthorized += 1
        return ok

    @staticmethod
    def _error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message}}, status_code=status)

    async def _server_info(self, request: Request) -> Response:
        if not self._authorized(request) or self.behaviour == "probe_401":
            return self._error(401, "missing or invalid bearer token")
        return JSONResponse(
            {
                "scheduler_backend": "sglang-ominix-v0-http-shim",
                "protocol_version": PROTOCOL,
                "mode": "fake" if self.behaviour == "fake_mode" else "grpc",
                "public_openai_api": False,
                "auth_required": True,
                "routes": {"generate": "/generate", "abort": "/abort_request"},
            }
        )

    async def _model_info(self, request: Request) -> Response:
        if not self._authorized(request) or self.behaviour == "probe_401":
            return self._error(401, "missing or invalid bearer token")
        served = "some/other-model" if self.behaviour == "wrong_model" else self.served_model
        return JSONResponse({"served_model_name": served, "is_generation": self.behaviour != "not_generation"})

    async def _abort(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "missing or invalid bearer token")
        self.aborts.append(await request.json())
        return JSONResponse({"aborted": True})

    async def _generate(self, request: Request) -> Response:
        if not self._authorized(request):
            return self._error(401, "missing or invalid bearer token")
        body = await request.json()
        self.generate_requests.append(body)
        if self.generate_status is not None or self.behaviour != "ok":
            self.unclean.append(body.get("request_id", ""))
        if self.generate_status is not None:
            return self._error(self.generate_status, f"injected status {self.generate_status}")
        behaviour = self.behaviour
        if behaviour == "slow":
            await asyncio.sleep(self.slow_s)
        if behaviour == "redirect":
            return Response(status_code=307, headers={"location": "http://127.0.0.1:9/generate"})
        if behaviour == "json_content_type":
            return JSONResponse({"text": "pong"})
        frames = self._frames(body["request_id"], behaviour)
        return StreamingResponse(frames, media_type="text/event-stream")

    async def _frames(self, request_id: str, behaviour: str):
        def event(kind: str, **fields) -> bytes:
            payload = {
                "protocol_version": PROTOCOL,
                "message_type": "WorkerEvent",
                "request_id": "ominix-someone-else" if behaviour == "wrong_request_id" else request_id,
                "kind": kind,
                "created_at_ms": int(time.time() * 1000),
                "sequence_index": 1 if behaviour == "sequence_index" else 0,
                **fields,
            }
            if behaviour == "no_created_at":
                del payload["created_at_ms"]
            return f"data: {json.dumps(payload)}\n\n".encode()

        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        done_reason = {"abort_finish": "abort", "tool_calls_finish": "tool_calls"}.get(behaviour, "stop")
        try:
            yield b": worker-v0 stream\n\n"
            yield event("prefill_done", usage={"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5})
            if behaviour == "endless":
                deadline = time.time() + self.slow_s
                while time.time() < deadline:
                    yield event("token", text_delta="tick ")
                    await asyncio.sleep(0.05)
            # CRLF framing for one event: the proxy must accept both separators.
            yield event("token", text_delta="po").replace(b"\n\n", b"\r\n\r\n")
            if behaviour == "malformed_sse":
                yield b"data: {not json\n\n"
            if behaviour == "invalid_utf8":
                yield b"data: \xff\xfe\n\n"
            if behaviour == "error_event":
                yield event("error", error={"message": "CUDA out of memory"})
            if behaviour == "unknown_kind":
                yield event("telemetry")
            yield event("token", text_delta="ng")
            if behaviour == "no_done_event":
                yield b"data: [DONE]\n\n"
                return
            yield event("done", text_delta="", finish_reason=done_reason, usage=usage)
            if behaviour == "events_after_done":
                yield event("token", text_delta="!")
            if behaviour == "missing_done":
                return
            if behaviour == "unterminated":
                yield b"data: [DONE]"
                return
            yield b"data: [DONE]\n\n"
            if behaviour == "data_after_done_marker":
                yield event("token", text_delta="late")
        except (asyncio.CancelledError, GeneratorExit):
            self.streams_closed_early += 1
            raise
