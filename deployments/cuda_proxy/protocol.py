"""The worker-v0 protocol as OminiX-API speaks it: which chat requests may go to the CUDA
worker, the generate/abort envelopes, the worker's event grammar, readiness identity checks,
and the mapping of every failure onto the public HTTP status and message.

Pure functions and small state machines: no network, no Ray, no MLX.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from deployments.cuda_proxy.config import CudaRoute
from deployments.protocol.errors import APIError
from deployments.protocol.openai import UsageInfo

PROTOCOL_VERSION = "ominix.worker.v0"
SHIM_BACKEND = "sglang-ominix-v0-http-shim"
DEFAULT_MAX_NEW_TOKENS = 2048
FINISH_REASONS = frozenset({"stop", "length", "content_filter"})

UNSUPPORTED_MESSAGE = "The selected CUDA model does not support this request"
TIMEOUT_MESSAGE = "The CUDA inference backend timed out"
FAILED_MESSAGE = "The CUDA inference backend failed"
STREAM_FAILED_MESSAGE = "CUDA inference stream failed"
STREAM_INVALID_MESSAGE = "CUDA inference stream was invalid"
STREAM_PREMATURE_MESSAGE = "CUDA inference stream ended prematurely"
UPSTREAM_ERROR = "upstream_error"


# ---------------------------------------------------------------------------------------------
# Failures. Each kind maps to one HTTP status before streaming and one message mid-stream.


class ShimError(Exception):
    """Something went wrong on the way to, or coming back from, the worker."""


class Unsupported(ShimError):
    """The request uses a feature the CUDA route does not offer (checked before any call)."""

    def __init__(self, what: str, param: Optional[str] = None):
        super().__init__(what)
        self.param = param  # the request field, named in the 400's `param`


class NotReady(ShimError):
    """The readiness probe did not find the expected production shim and model."""


class UpstreamStatus(ShimError):
    def __init__(self, status: int, detail: str = ""):
        super().__init__(f"worker answered HTTP {status}: {detail}")
        self.status = status


class UpstreamTimeout(ShimError):
    """The configured whole-request timeout (or the connect timeout) expired."""


class TransportError(ShimError):
    """Connection refused, reset, or broken while reading."""


class ProtocolError(ShimError):
    """The worker answered something the protocol does not allow."""


class InvalidStream(ProtocolError):
    """The SSE bytes (or an event's JSON) could not be decoded."""


class PrematureEnd(ProtocolError):
    """The stream ended before the worker's `[DONE]`."""


class RemoteError(ShimError):
    """The worker reported an error or an abort."""


def http_error(error: ShimError) -> APIError:
    """The client's HTTP error for a failure before any response byte was sent: OminiX-API's
    mapping (400 unsupported, 504 timed out, 503 not ready or refused, 502 anything else)."""
    status = error.status if isinstance(error, UpstreamStatus) else None
    if isinstance(error, Unsupported):
        return APIError(400, UNSUPPORTED_MESSAGE, UPSTREAM_ERROR, error.param)
    if status in (400, 422):
        return APIError(400, UNSUPPORTED_MESSAGE, UPSTREAM_ERROR)
    if isinstance(error, UpstreamTimeout) or status in (408, 504):
        return APIError(504, TIMEOUT_MESSAGE, UPSTREAM_ERROR)
    if isinstance(error, NotReady) or status in (401, 403, 429, 503):
        return APIError(503, FAILED_MESSAGE, UPSTREAM_ERROR)
    return APIError(502, FAILED_MESSAGE, UPSTREAM_ERROR)


def stream_error(error: ShimError) -> APIError:
    """The error event for a failure after the 200 and the first chunk went out."""
    if isinstance(error, (TransportError, UpstreamTimeout)):
        message = STREAM_FAILED_MESSAGE
    elif isinstance(error, InvalidStream):
        message = STREAM_INVALID_MESSAGE
    elif isinstance(error, PrematureEnd):
        message = STREAM_PREMATURE_MESSAGE
    else:
        message = http_error(error).message
    return APIError(502, message, UPSTREAM_ERROR)


# ---------------------------------------------------------------------------------------------
# Requests


class CudaMessage(BaseModel):
    """A chat message as the client sent it; forwarded to the worker unchanged."""

    model_config = ConfigDict(extra="allow")

    role: str
    content: Union[str, list[Any], None] = None


class CudaChatRequest(BaseModel):
    """The chat fields the CUDA route reads. Loose on purpose: unsupported features must reach
    `check_supported` and get the route's own 400, not a generic validation error."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[CudaMessage] = Field(..., min_length=1)
    max_tokens: Optional[int] = Field(None, ge=0)
    max_completion_tokens: Optional[int] = Field(None, ge=0)  # OpenAI's newer name for max_tokens
    chat_template_kwargs: Optional[dict[str, Any]] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stream: bool = False
    tools: Optional[list[Any]] = None
    tool_choice: Any = None
    response_format: Any = None

    def token_budget(self) -> Optional[int]:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


# Fields that change the answer and that worker-v0's sampling (max_new_tokens, temperature,
# top_p) cannot carry, each with the values that change nothing (sent by some clients by
# default, so those pass). OminiX-API drops them silently; here any other value is the
# route's 400 naming the field, never an answer that ignored it.
NOT_FORWARDED: dict[str, tuple[Any, ...]] = {
    "stop": (None, [], ""),
    "seed": (None,),
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "repetition_penalty": (None, 1),
    "logit_bias": (None, {}),
    "ignore_eos": (None, False),
    "min_tokens": (None, 0),
    "reasoning_effort": (None,),
    "modalities": (None, ["text"]),
    "audio": (None,),
    "prediction": (None,),
    "verbosity": (None,),
    "web_search_options": (None,),
    "functions": (None, []),
    "function_call": (None, "none"),
}


def check_supported(request: CudaChatRequest) -> None:
    """Spec 6.4: plain-string text chat only; raise `Unsupported` otherwise. worker-v0 has no
    constrained decoding: a JSON `response_format` is refused, never dropped; nor is any other
    field that would change the answer (NOT_FORWARDED)."""
    if request.token_budget() == 0:
        raise Unsupported("max_tokens is 0")
    extra = request.model_extra or {}
    for name, unchanged in NOT_FORWARDED.items():
        if extra.get(name) not in unchanged:
            raise Unsupported(f"{name} (worker-v0 samples with max_new_tokens, temperature and top_p only)", name)
    if extra.get("keep_alive") is not None:
        # The worker keeps its one model resident; nothing here can load or unload it.
        raise Unsupported("keep_alive", "keep_alive")
    if extra.get("n") not in (None, 1):
        raise Unsupported("n (the worker generates one choice)", "n")
    for name in ("logprobs", "top_logprobs"):
        if extra.get(name) not in (None, False):
            raise Unsupported(f"{name} (the worker returns no log-probabilities)", name)
    if request.tools:
        raise Unsupported("tools", "tools")
    if request.tool_choice is not None and request.tool_choice != "none":
        raise Unsupported("tool_choice", "tool_choice")
    if request.response_format is not None and request.response_format != {"type": "text"}:
        raise Unsupported("response_format", "response_format")
    for message in request.messages:
        extra = message.model_extra or {}
        if message.role == "tool" or extra.get("tool_calls") or extra.get("tool_call_id"):
            raise Unsupported("tool messages", "messages")
        if isinstance(message.content, list):
            raise Unsupported("content parts", "messages")


def new_request_id() -> str:
    return f"ominix-{uuid.uuid4().hex}"


def generate_envelope(request: CudaChatRequest, request_id: str, route: CudaRoute, stream: bool) -> dict[str, Any]:
    """The POST /generate body: the served id, never the public one."""
    budget = request.token_budget()
    sampling: dict[str, Any] = {"max_new_tokens": budget if budget is not None else DEFAULT_MAX_NEW_TOKENS}
    if request.temperature is not None:
        sampling["temperature"] = request.temperature
    if request.top_p is not None:
        sampling["top_p"] = request.top_p
    return {
        "protocol_version": PROTOCOL_VERSION,
        "message_type": "GenerateRequest",
        "request_id": request_id,
        "model": route.served_model,
        "input": {
            "kind": "chat",
            "messages": [m.model_dump(exclude_unset=True) for m in request.messages],
            # The route's own (OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON), under the request's.
            "chat_template_kwargs": {**route.chat_template_kwargs, **(request.chat_template_kwargs or {})},
        },
        "sampling": sampling,
        "response_options": {"skip_special_tokens": True, "spaces_between_special_tokens": True},
        "stream": stream,
    }


def abort_envelope(request_id: str) -> dict[str, Any]:
    return {
        "protocol_version": PROTOCOL_VERSION,
        "message_type": "AbortRequest",
        "request_id": request_id,
        "reason": "client_disconnect_or_upstream_failure",
    }


def error_detail(body: bytes, limit: int = 512) -> str:
    """What a non-2xx worker body says (for the log only): `error.message` or the raw text."""
    text = body.decode("utf-8", errors="replace")
    try:
        message = json.loads(text)["error"]["message"]
        if isinstance(message, str):
            text = message
    except (ValueError, KeyError, TypeError):
        pass
    return text[:limit]


# ---------------------------------------------------------------------------------------------
# Readiness: OminiX-API counts a worker as ready only when /server_info names a production
# worker-v0 shim and /get_model_info names the configured served model.


def production_shim_problem(info: Any) -> Optional[str]:
    """Why a /server_info body is not a production worker-v0 shim; None when it is."""
    if not isinstance(info, dict):
        return "server_info is not a JSON object"
    expected = {
        "scheduler_backend": SHIM_BACKEND,
        "protocol_version": PROTOCOL_VERSION,
        "mode": "grpc",
        "public_openai_api": False,
        "auth_required": True,
    }
    for key, value in expected.items():
        if info.get(key) != value or type(info.get(key)) is not type(value):
            return f"server_info {key} is {info.get(key)!r}, expected {value!r}"
    routes = info.get("routes")
    if not isinstance(routes, dict) or routes.get("generate") != "/generate":
        return "server_info routes.generate is not '/generate'"
    return None


def model_problem(info: Any, served_model: str) -> Optional[str]:
    """Why a /get_model_info body does not describe the configured generation model."""
    if not isinstance(info, dict):
        return "get_model_info is not a JSON object"
    if info.get("served_model_name") != served_model:
        return f"worker serves {info.get('served_model_name')!r}, expected {served_model!r}"
    if info.get("is_generation") is not True:
        return "worker model is not a generation model"
    return None


# ---------------------------------------------------------------------------------------------
# Worker events: the grammar of the shim's SSE stream for one generate request.


class WorkerStream:
    """Checks the worker's event sequence for one request and accumulates its result.

    Feed it every SSE data payload in order (`accept`), then call `end` at end of stream.
    """

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.text = ""
        self.usage = UsageInfo()
        self.finish_reason: Optional[str] = None
        self.done_seen = False
        self.finished = False  # the worker's [DONE] was consumed after a valid `done`

    def accept(self, payload: str) -> str:
        """Validate one payload; return the text it adds ("" if none)."""
        if self.finished:
            raise ProtocolError("data after [DONE]")
        if payload == "[DONE]":
            if not self.done_seen:
                raise ProtocolError("[DONE] before the done event")
            self.finished = True
            return ""
        event = _parse_event(payload)
        self._check_envelope(event)
        if self.done_seen:
            raise ProtocolError("event after done")
        return self._apply(event)

    def end(self) -> None:
        if not self.finished:
            raise PrematureEnd("stream ended without [DONE]")

    def _check_envelope(self, event: dict[str, Any]) -> None:
        if event.get("protocol_version") != PROTOCOL_VERSION or event.get("message_type") != "WorkerEvent":
            raise ProtocolError("not a worker-v0 WorkerEvent")
        if event.get("request_id") != self.request_id:
            raise ProtocolError(f"event for request {event.get('request_id')!r}")
        created = event.get("created_at_ms")
        if not isinstance(created, int) or isinstance(created, bool) or created < 0:
            raise ProtocolError("created_at_ms missing or not an unsigned integer")
        index = event.get("sequence_index")
        if index is not None and (index != 0 or isinstance(index, bool)):
            raise ProtocolError(f"sequence_index {index!r} (only one sequence is requested)")

    def _apply(self, event: dict[str, Any]) -> str:
        kind = event.get("kind")
        if kind in ("prefill_done", "usage"):
            self._take_usage(event)
            return ""
        if kind == "token":
            return self._take_text(event)
        if kind == "done":
            reason = event.get("finish_reason")
            if reason == "abort":
                raise RemoteError("worker aborted the request")
            if reason == "error":
                raise RemoteError("worker finished with an error")
            if reason not in FINISH_REASONS:
                raise ProtocolError(f"finish_reason {reason!r}")
            self._take_usage(event)
            self.finish_reason = reason
            self.done_seen = True
            return self._take_text(event)
        if kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            raise RemoteError(f"worker error: {message!r}")
        raise ProtocolError(f"unknown event kind {kind!r}")

    def _take_text(self, event: dict[str, Any]) -> str:
        delta = event.get("text_delta")
        if delta is None:
            return ""
        if not isinstance(delta, str):
            raise ProtocolError("text_delta is not a string")
        self.text += delta
        return delta

    def _take_usage(self, event: dict[str, Any]) -> None:
        usage = event.get("usage")
        if usage is None:
            return
        try:
            self.usage = UsageInfo.model_validate(usage, strict=True)
        except ValueError:
            raise ProtocolError("usage is not a token-count object") from None


def _parse_event(payload: str) -> dict[str, Any]:
    try:
        event = json.loads(payload)
    except json.JSONDecodeError:
        raise InvalidStream("event is not JSON") from None
    if not isinstance(event, dict):
        raise InvalidStream("event is not a JSON object")
    return event
