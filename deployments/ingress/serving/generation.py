"""Chat and text completions: which deployment answers a chat completion (`serve_chat`: the
CUDA route, the VLM slot or the LLM slot), and `ServingChat` and `ServingCompletion`, which turn
a slot's stream of `GenerationChunk`s into OpenAI's JSON response or SSE chunks.

A chat completion goes to the VLM slot when its `model` is one the VLM slot serves, and only
then (never by guessing from its content); image parts sent to any other model are a 400. The
images are loaded and checked here (deployments/vlm/images.py: data URLs, remote URLs only
where allowed, decodable, within the limits) before the slot sees the request. Constrained
answers (`response_format`, a forced `tool_choice`) are the LLM slot's alone: the VLM engine
(mlx-vlm's one-request generation) applies no grammar, so a vision model refuses them.

Both serving classes pick the model, check what only the ingress knows (the slot's `n` limit),
open the slot's stream (errors before its first chunk keep their HTTP status) and answer; each
builds its own response shapes. A request for n choices is one slot stream whose chunks name
their choice. A constrained answer is checked here first: a schema the grammar engine cannot
compile, or a forced tool that is not there, is a 400 that never reaches a replica
(deployments/llm/constraints.py); and last: each finished choice is checked against its schemas
as sent, and resampled when it fails (ingress/serving/structured.py).

The other protocols on the LLM (the Responses API, Anthropic Messages: ingress/serving/
responses.py, messages.py) translate their request into a chat request and open it here
(`open_chat`): the same dispatch, checks and slot call as a chat completion, only the shapes
of the answer are theirs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Optional

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from deployments.ingress.clients import SlotStream
from deployments.ingress.errors import validate_body
from deployments.ingress.responses import json_response, sse_response
from deployments.ingress.serving.adapters import resolve_model
from deployments.ingress.serving.cuda import open_cuda_chat, routes_to_cuda, serve_cuda_chat
from deployments.ingress.serving.keep_alive import keep_model_alive
from deployments.ingress.serving.structured import CheckedStream, attempts_budget
from deployments.ingress.state import IngressState
from deployments.llm.answer_check import SCHEMA_NOT_MET, AnswerCheck, retry_fields
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.generation import GenerationChunk, collect_choices
from deployments.protocol.logprobs import ChoiceLogprobs, CompletionLogprobShaper
from deployments.protocol.openai import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    DeltaMessage,
    SamplingRequest,
    ToolCallDelta,
    UsageInfo,
    now,
    random_id,
)
from deployments.protocol.sse import HOLE, SSEFrame
from deployments.routing.affinity import llm_affinity_key
from deployments.vlm.images import ImageLimits, load_images

# Both get the resolved model id, which responses echo.
StreamBuilder = Callable[[SlotStream, str], AsyncIterator[BaseModel | dict | bytes]]
FullBuilder = Callable[[dict[int, GenerationChunk], Optional[UsageInfo], str], BaseModel]

DEFAULT_MAX_N = 8  # the LLM slot's llm.max_n when its catalog entry does not say


async def serve_generation(
    state: IngressState,
    method: str,
    request: SamplingRequest,
    session_header: Optional[str],
    to_events: StreamBuilder,
    to_response: FullBuilder,
    slot: str = "llm",
    args: tuple = (),
) -> JSONResponse | StreamingResponse:
    """Shared body of /v1/chat/completions (on the LLM or the VLM slot) and /v1/completions.
    `args` follow the request in the slot call (the VLM's images)."""
    stream, model = await open_generation(state, method, request, session_header, slot, args)
    if request.stream:
        return sse_response(to_events(stream, model))
    choices, usage = collect_choices([chunk async for chunk in stream.chunks()])
    return json_response(to_response(choices, usage, model))


async def open_generation(
    state: IngressState,
    method: str,
    request: SamplingRequest,
    session_header: Optional[str],
    slot: str = "llm",
    args: tuple = (),
    affinity: Optional[str] = None,
) -> tuple[SlotStream, str]:
    """The slot's stream for the request, opened up to its first chunk, and the model that
    answers (what responses echo). `affinity`: the routing key, when the caller knows it
    (a stored conversation's); else the request's own."""
    # Compiling a large schema takes milliseconds: off the event loop.
    check = await asyncio.to_thread(AnswerCheck.of, request) if slot == "llm" else None
    client = state.slot(slot)
    model = await resolve_model(state, slot, request.model)
    check_choice_count(state, slot, request)
    # The conversation's key: the slot's router keeps it on the replica holding its prefix cache.
    session = affinity or llm_affinity_key(request, session_header)
    stream = await client.stream(method, request, *args, model=model, session=session)
    served = (stream.first.model if stream.first else None) or model
    await keep_model_alive(state, slot, served, request.keep_alive)
    if check is not None:
        stream = checked_stream(state, method, request, check, stream, served, session)
    return stream, served or "unknown"


def checked_stream(
    state: IngressState,
    method: str,
    request: SamplingRequest,
    check: AnswerCheck,
    stream: SlotStream,
    model: Optional[str],
    session: Optional[str],
) -> CheckedStream:
    """The stream with each finished choice checked against its schemas, a failed one resampled
    on the same model (and replica, by the same routing key)."""

    async def open_attempt(choices: int, attempt: int) -> SlotStream:
        retry = request.model_copy(update=retry_fields(request, attempt, choices))
        return await state.slot("llm").stream(method, retry, model=model, session=session)

    return CheckedStream(
        stream,
        check,
        open_attempt,
        attempts_budget(state.catalog.slots["llm"].options),
        streamed=bool(request.stream),
        record=lambda result: state.metrics.schema_check(model or "unknown", result),
    )


def check_choice_count(state: IngressState, slot: str, request: SamplingRequest) -> None:
    """n over the slot's limit is a 400 before the slot sees the request."""
    limit = state.catalog.slots[slot].options.get("max_n", DEFAULT_MAX_N)
    if request.choice_count() > limit:
        raise invalid_request(f"n: at most {limit} choices per request are served here ({slot}.max_n)", "n")


def message_content(total: GenerationChunk) -> Optional[str]:
    """A chat answer's `content`: null beside tool calls, and where no answer is returned (a
    structured answer withheld: finish_reason schema_not_met)."""
    if total.finish_reason == SCHEMA_NOT_MET or (total.tool_calls and not total.content):
        return None
    return total.content


def chat_logprobs(part: GenerationChunk) -> Optional[ChoiceLogprobs]:
    return None if part.logprobs is None else ChoiceLogprobs(content=part.logprobs)


async def serve_chat(
    state: IngressState, body: dict[str, Any], session_header: Optional[str] = None
) -> JSONResponse | StreamingResponse:
    """POST /v1/chat/completions on the deployment that answers it. Routing comes before
    validation: a CUDA-mapped id is answered by the CUDA route's own rules (and never by a
    local slot), everything else by the local LLM slot, or the VLM slot for a VLM model id."""
    if routes_to_cuda(state, body):
        return await serve_cuda_chat(state, body)
    request = validate_body(ChatCompletionRequest, body)
    serving = await chat_serving(state, request)
    return await serving.create(request, session_header)


class ChatGeneration(NamedTuple):
    """A chat request opened on the deployment that answers it, for a protocol that shapes the
    answer its own way: its chunks (the first one already arrived: errors before it kept their
    status), the model that answers, and the routing key it went with (None: the CUDA route)."""

    chunks: AsyncIterator[GenerationChunk]
    model: str
    affinity: Optional[str] = None
    first: Optional[GenerationChunk] = None  # the first chunk (its sampling, its prompt's length)


async def open_chat(
    state: IngressState, body: dict[str, Any], session_header: Optional[str] = None, affinity: Optional[str] = None
) -> ChatGeneration:
    """A chat request (a dict, as /v1/chat/completions takes it) dispatched as `serve_chat` does
    (the CUDA route for a mapped id, else the VLM or the LLM slot) and opened, one choice.
    `affinity`: the routing key to use instead of the request's own (a stored conversation's)."""
    if routes_to_cuda(state, body):
        chunks, model = await open_cuda_chat(state, body)
        return ChatGeneration(chunks, model)
    request = validate_body(ChatCompletionRequest, body)
    serving = await chat_serving(state, request)
    key = affinity or llm_affinity_key(request, session_header)
    stream, model = await serving.open(request, session_header, key)
    return ChatGeneration(stream.chunks(), model, key, stream.first)


def serves_vision(state: IngressState, model: str | None) -> bool:
    """The VLM slot is on and allows `model` (listed, or a directory under its models_dir)."""
    if not model or "vlm" not in state.catalog.slots:
        return False
    try:
        state.catalog.check_loadable("vlm", model)
    except APIError:
        return False
    return True


def image_limits(state: IngressState) -> ImageLimits:
    return ImageLimits.from_dict(state.catalog.slots["vlm"].options.get("image_limits"))


def check_vlm_fields(state: IngressState, request: ChatCompletionRequest) -> None:
    """What the LLM slot serves and the VLM slot cannot: a 400 naming the field, never an answer
    without it."""
    check_choice_count(state, "vlm", request)
    if request.reasoning_effort is not None:
        raise invalid_request("reasoning_effort: not served by the VLM slot", "reasoning_effort")
    refuse_constraints(request)


def refuse_constraints(request: ChatCompletionRequest) -> None:
    """A 400 for what a vision model would otherwise answer unconstrained."""
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        field = "response_format"
    elif request.tool_choice not in (None, "none", "auto"):
        field = "tool_choice"
    else:
        return
    raise invalid_request(
        f"{field}: constrained decoding is not available for vision models ('{request.model}'); "
        "use a text model, or leave the field out",
        field,
        "constrained_decoding_unavailable",
    )


async def chat_serving(state: IngressState, request: ChatCompletionRequest) -> ServingChat:
    """The serving class that answers this chat request on a local slot, with its images loaded."""
    if serves_vision(state, request.model):
        check_vlm_fields(state, request)
        return ServingChat(state, "vlm", tuple(await load_images(request.messages, image_limits(state))))
    if request.has_images():
        vision = state.catalog.ids("vlm")
        served = f"the vision models served here: {', '.join(vision)}" if vision else "no vision model is served here"
        raise invalid_request(
            f"messages: image content parts need a vision model; model '{request.model or 'the default LLM'}' "
            f"is text-only ({served})",
            "messages",
            "image_input_unsupported",
        )
    return ServingChat(state)


class ServingChat:
    """POST /v1/chat/completions on a local slot: the LLM, or the VLM with the request's images."""

    def __init__(self, state: IngressState, slot: str = "llm", images: tuple[bytes, ...] | None = None):
        self.state = state
        self.slot = slot
        self.args = () if images is None else (list(images),)

    async def create(
        self, request: ChatCompletionRequest, session_header: Optional[str] = None
    ) -> JSONResponse | StreamingResponse:
        """`session_header`: the client's x-session-id, a routing key when the body has none."""
        request_id = random_id("chatcmpl")

        def to_response(
            totals: dict[int, GenerationChunk], usage: Optional[UsageInfo], model: str
        ) -> ChatCompletionResponse:
            choices = [
                ChatChoice(
                    index=index,
                    message=AssistantMessage(
                        content=message_content(total),
                        reasoning_content=total.reasoning_content or None,
                        tool_calls=total.tool_calls or None,
                    ),
                    finish_reason=total.finish_reason,
                    logprobs=chat_logprobs(total),
                )
                for index, total in totals.items()
            ]
            return ChatCompletionResponse(id=request_id, model=model, choices=choices, usage=usage)

        def to_events(stream: SlotStream, model: str) -> AsyncIterator[ChatCompletionChunk]:
            return chat_events(stream, request_id, model, request.include_usage(), request.choice_count())

        return await serve_generation(
            self.state, "chat", request, session_header, to_events, to_response, self.slot, self.args
        )

    async def open(
        self, request: ChatCompletionRequest, session_header: Optional[str] = None, affinity: Optional[str] = None
    ) -> tuple[SlotStream, str]:
        """The slot's stream for the request and the model that answers (another protocol's
        serving shapes the answer)."""
        return await open_generation(self.state, "chat", request, session_header, self.slot, self.args, affinity)


async def chat_events(
    stream: SlotStream, request_id: str, model: str, include_usage: bool, n: int = 1
) -> AsyncIterator[ChatCompletionChunk | bytes]:
    created = now()  # one timestamp for the whole stream, as OpenAI's chunks carry

    def chunk(index: int, delta: DeltaMessage, finish_reason=None, logprobs=None) -> ChatCompletionChunk:
        choices = [ChatChunkChoice(index=index, delta=delta, finish_reason=finish_reason, logprobs=logprobs)]
        return ChatCompletionChunk(id=request_id, created=created, model=model, choices=choices)

    # Most events carry only answer text: framed once per choice, then one string encoded per token.
    content_events: dict[int, SSEFrame] = {}
    for index in range(n):
        yield chunk(index, DeltaMessage(role="assistant", content=""))
    tool_index: dict[int, int] = {}  # per choice: its tool calls are numbered from 0
    usage = None
    async for part in stream.chunks():
        index, logprobs = part.index, chat_logprobs(part)
        usage = part.usage or usage
        if part.content and logprobs is None and not (part.reasoning_content or part.tool_calls or part.finish_reason):
            if index not in content_events:
                content_events[index] = SSEFrame(chunk(index, DeltaMessage(content=HOLE)))
            yield content_events[index](part.content)
            continue
        tool_deltas = []
        for call in part.tool_calls:
            tool_deltas.append(ToolCallDelta(index=tool_index.get(index, 0), **call.model_dump()))
            tool_index[index] = tool_index.get(index, 0) + 1
        if part.content or part.reasoning_content or tool_deltas:
            delta = DeltaMessage(
                content=part.content or None,
                reasoning_content=part.reasoning_content or None,
                tool_calls=tool_deltas or None,
            )
            yield chunk(index, delta, logprobs=logprobs)
            logprobs = None
        if part.finish_reason is not None:
            # Entries of tokens that left no text (a stop string's) come with the finish.
            yield chunk(index, DeltaMessage(), part.finish_reason, logprobs if logprobs and logprobs.content else None)
    if include_usage and usage is not None:
        yield ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage)


class ServingCompletion:
    """POST /v1/completions (legacy text completions) on the LLM slot."""

    def __init__(self, state: IngressState):
        self.state = state

    async def create(
        self, request: CompletionRequest, session_header: Optional[str] = None
    ) -> JSONResponse | StreamingResponse:
        request_id = random_id("cmpl")
        echo = (request.prompt_text() or "") if request.echo else ""

        def event(model: str, choice: Optional[CompletionChoice] = None, usage=None) -> CompletionResponse:
            choices = [] if choice is None else [choice]
            return CompletionResponse(id=request_id, model=model, choices=choices, usage=usage)

        def to_response(
            totals: dict[int, GenerationChunk], usage: Optional[UsageInfo], model: str
        ) -> CompletionResponse:
            choices = [
                CompletionChoice(
                    index=index,
                    text=echo + total.content,
                    finish_reason=total.finish_reason,
                    logprobs=None
                    if total.logprobs is None
                    else CompletionLogprobShaper(len(echo)).shape(total.logprobs),
                )
                for index, total in totals.items()
            ]
            return CompletionResponse(id=request_id, model=model, choices=choices, usage=usage)

        async def to_events(stream: SlotStream, model: str) -> AsyncIterator[CompletionResponse]:
            if echo:
                for index in range(request.choice_count()):
                    yield event(model, CompletionChoice(index=index, text=echo))
            shapers: dict[int, CompletionLogprobShaper] = {}
            usage: Optional[UsageInfo] = None
            async for part in stream.chunks():
                if part.content or part.finish_reason:
                    logprobs = None
                    if part.logprobs is not None:
                        shaper = shapers.setdefault(part.index, CompletionLogprobShaper(len(echo)))
                        logprobs = shaper.shape(part.logprobs)
                    choice = CompletionChoice(
                        index=part.index, text=part.content, finish_reason=part.finish_reason, logprobs=logprobs
                    )
                    yield event(model, choice)
                usage = part.usage or usage
            if request.include_usage() and usage is not None:
                yield event(model, usage=usage)

        return await serve_generation(self.state, "completions", request, session_header, to_events, to_response)
