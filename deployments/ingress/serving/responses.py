"""POST /v1/responses and the stored responses (GET, DELETE, input_items): OpenAI's Responses
API served by translation onto the chat generation path (`open_chat`, ingress/serving/
generation.py), so the CUDA route, the VLM for images, limits, batching and the prefix cache
apply as to a chat completion. The shapes are deployments/protocol/responses.py's.

A stored response (`store`, the default) is a record of the graph's record store (Control's,
deployments/records.py): the response and the whole conversation that led to it, so a request
with `previous_response_id` continues it from any ingress replica, after any ingress restart.
Every turn of a stored conversation is routed with the key its first turn had (its client's
key, else its head: docs/routing.md), so it reaches the LLM replica holding its prefix cache even
when the instructions change. A request that fails before the answer begins stores nothing.

The same turns run over HTTP (JSON, SSE) and over a WebSocket (serving/responses_socket.py):
`open_turn` opens one, `Turn.events` yields its events as dicts, each transport frames them.
`compact` is POST /v1/responses/compact (deployments/protocol/compaction.py): the model
summarises the conversation through the same chat path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, Optional

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from deployments.ingress.errors import from_exception, validate_body, validation_error
from deployments.ingress.responses import sse_response
from deployments.ingress.serving import background
from deployments.ingress.serving.conversations import ServingConversations
from deployments.ingress.serving.generation import ChatGeneration, open_chat
from deployments.ingress.state import IngressState
from deployments.protocol.compaction import (
    compacted_window,
    compaction_item,
    compaction_object,
    summary_chat_body,
)
from deployments.protocol.errors import APIError, invalid_request, renamed
from deployments.protocol.generation import GenerationChunk, collect_choices
from deployments.protocol.openai import UsageInfo
from deployments.protocol.responses import (
    CHAT_TO_RESPONSES_PARAMS,
    CompactRequest,
    ResponseDeleted,
    ResponseEvents,
    ResponsesRequest,
    chat_body,
    finish_status,
    from_turn,
    item_page,
    new_id,
    normalise_items,
    output_items,
    response_not_found,
    response_object,
    usage_object,
    user_turns,
)
from deployments.protocol.sse import SSE_DONE, sse_event
from deployments.records import DEFAULT_LIMITS, RESPONSES, RecordTooLarge

logger = logging.getLogger("ray.serve")

MAX_LISTED_ITEMS = 100


class ServingResponses:
    def __init__(self, state: IngressState):
        self.state = state
        self.records = state.record_store()

    # ------------------------------------------------------------------ POST /v1/responses

    async def create(self, body: dict[str, Any], session_header: Optional[str] = None) -> Any:
        request = validate_body(ResponsesRequest, body)
        turn, generation = await self.open_turn(request, session_header)
        if request.background:
            return JSONResponse(await turn.in_background(generation))
        if request.stream:
            # The spec's terminal event is the literal [DONE] (the openai SDK stops on it too).
            return sse_response((sse_event(event) async for event in turn.events(generation)), end=SSE_DONE)
        return JSONResponse(await turn.complete(generation))

    async def open_turn(
        self, request: ResponsesRequest, session_header: Optional[str], recent: Optional[Recent] = None
    ) -> tuple[Turn, ChatGeneration]:
        """The turn a request starts, its answer opened (errors before the first token keep their
        status). `recent`: a WebSocket's own last response, looked up before the record store."""
        history, chain = await self._continued(request.previous_response_id, request.conversation_id(), recent)
        added = normalise_items(request.input_items())
        conversation = history + added
        if request.store:
            self._check_storable(conversation)
        # A key the client names wins, as in chat; else the chain's, so the turns share a replica.
        named = request.prompt_cache_key or request.user or session_header
        generation = await self._open_fitting(
            lambda items: chat_body(request, items),
            conversation,
            request.truncation == "auto",
            session_header,
            None if named else chain,
        )
        turn = Turn(self, request, new_id("resp"), conversation, added, chain or generation.affinity, generation)
        return turn, generation

    async def _continued(
        self,
        previous_response_id: Optional[str],
        conversation_id: Optional[str] = None,
        recent: Optional[Recent] = None,
    ) -> tuple[list[dict[str, Any]], Optional[str]]:
        """The stored conversation a request continues (a previous response's items, then its
        output; or a conversation's items), and its chain's routing key."""
        if conversation_id is not None:
            stored = await ServingConversations(self.state).stored(conversation_id, "conversation")
            return stored["items"], f"conversation:{conversation_id}"
        if previous_response_id is None:
            return [], None
        if recent is not None and recent.response_id == previous_response_id:
            return recent.items, recent.chain
        record = await self.records.get(RESPONSES, previous_response_id)
        if record is None:
            raise response_not_found(previous_response_id, "previous_response_id")
        stored = record.value
        if stored["response"]["status"] in ("queued", "in_progress"):
            raise invalid_request(
                f"previous_response_id: response '{previous_response_id}' is still in progress",
                "previous_response_id",
            )
        return stored["input"] + stored["response"]["output"], stored.get("chain")

    @staticmethod
    def _check_storable(conversation: list[dict[str, Any]]) -> None:
        cap = DEFAULT_LIMITS[RESPONSES].record_cap()
        size = len(json.dumps(conversation, ensure_ascii=False).encode())
        if size > cap:
            raise invalid_request(
                f"input: the conversation is {size} bytes, more than a stored response keeps ({cap}); "
                "start a new conversation, or send store: false",
                "input",
                "input_too_large",
            )

    async def compact(self, body: dict[str, Any], session_header: Optional[str] = None) -> dict[str, Any]:
        """POST /v1/responses/compact: the conversation (a previous response's, then `input`) as
        a compacted window, its summary written by the model (docs/api/responses.md)."""
        request = validate_body(CompactRequest, body)
        history, chain = await self._continued(request.previous_response_id)
        items = history + normalise_items(request.input_items())
        if not items:
            raise invalid_request("input: the conversation to compact has no items", "input")
        # A conversation past the model's context is summarised from its latest turns that fit.
        generation = await self._open_fitting(
            lambda turns: summary_chat_body(request, turns), items, True, session_header, chain
        )
        choices, usage = collect_choices([chunk async for chunk in generation.chunks])
        summary = choices.get(0, GenerationChunk()).content.strip()
        output = compacted_window(items, compaction_item(new_id("cmp"), summary))
        return compaction_object(new_id("resp"), output, usage_object(usage) or usage_object(UsageInfo()))

    async def _open_fitting(
        self,
        chat_for: Callable[[list[dict[str, Any]]], dict[str, Any]],
        conversation: list[dict[str, Any]],
        truncate: bool,
        session_header: Optional[str],
        affinity: Optional[str],
    ) -> ChatGeneration:
        """The chat request `chat_for` makes of the conversation, opened; with `truncate`
        (`truncation: "auto"`; a compaction), a conversation the model's context cannot hold is
        sent again without its oldest turn until it fits (the LLM slot refuses an overlong prompt
        before it generates: each try is one tokenization). What is stored is the whole
        conversation."""
        first = 0
        while True:
            try:
                return await self._open(chat_for(from_turn(conversation, first)), session_header, affinity)
            except APIError as e:
                full = e.code == "context_length_exceeded"
                if not full or not truncate or first + 1 >= user_turns(conversation):
                    raise
                first += 1
                logger.info("Response: the conversation is past the context; left out its turn %d", first)

    async def _open(
        self, chat: dict[str, Any], session_header: Optional[str], affinity: Optional[str]
    ) -> ChatGeneration:
        try:
            return await open_chat(self.state, chat, session_header, affinity)
        except APIError as e:
            raise renamed(e, CHAT_TO_RESPONSES_PARAMS) from None
        except RequestValidationError as e:
            raise renamed(validation_error(e), CHAT_TO_RESPONSES_PARAMS) from None

    async def store(self, response: dict[str, Any], conversation: list[dict[str, Any]], chain: Optional[str]) -> None:
        """Keep a finished response. A store that cannot keep it costs the client nothing but
        the later retrieval (logged)."""
        try:
            await self.records.put(
                RESPONSES, response["id"], {"response": response, "input": conversation, "chain": chain}
            )
        except RecordTooLarge as e:
            logger.warning("Response %s not stored: %s", response["id"], e)
        except Exception as e:
            logger.warning("Response %s not stored: %s", response["id"], from_exception(e).message)

    async def append_turn(self, conversation_id: str, items: list[dict[str, Any]]) -> None:
        """A finished response's input and output after the conversation's items. The answer
        stands if that fails (the conversation was deleted meanwhile, or is full): logged, and
        the next request that names it is told."""
        try:
            await ServingConversations(self.state).append(conversation_id, items)
        except Exception as e:
            logger.warning("Conversation %s: this turn was not added: %s", conversation_id, from_exception(e).message)

    # ------------------------------------------------------------------ stored responses

    async def stored(self, response_id: str) -> dict[str, Any]:
        record = await self.records.get(RESPONSES, response_id)
        if record is None:
            raise response_not_found(response_id)
        return record.value

    async def retrieve(self, response_id: str) -> dict[str, Any]:
        return (await background.settled(self.records, response_id, await self.stored(response_id)))["response"]

    async def cancel(self, response_id: str) -> dict[str, Any]:
        return await background.cancel(self.records, response_id)

    async def delete(self, response_id: str) -> ResponseDeleted:
        if not await self.records.delete(RESPONSES, response_id):
            raise response_not_found(response_id)
        return ResponseDeleted(id=response_id)

    async def input_items(self, response_id: str, after: Optional[str], limit: int, order: str) -> dict[str, Any]:
        items = (await self.stored(response_id))["input"]
        return item_page(items, after, limit, order, f"response '{response_id}'")


class Recent(NamedTuple):
    """A response a WebSocket keeps for its next turn (stored or not): the whole conversation
    it ends (its input items, then its output) and its chain's routing key."""

    response_id: str
    items: list[dict[str, Any]]
    chain: Optional[str]


class Turn:
    """One response being answered: its id, the conversation it answers, and how it ends
    (a response object, stored when asked; `final` once its events are done)."""

    def __init__(self, serving, request, response_id, conversation, added, chain, generation: ChatGeneration):
        self.serving = serving
        self.request: ResponsesRequest = request
        self.id = response_id
        self.conversation = conversation
        self.chain = chain
        self.model = generation.model
        # The sampling the slot reports on its first chunk: what the response object echoes.
        self.sampling = generation.first.sampling if generation.first else None
        self.created_at = int(time.time())
        self.added: list[dict[str, Any]] = added  # this request's own input items (conversation's last)
        self.final: Optional[dict[str, Any]] = None

    def response(self, **fields: Any) -> dict[str, Any]:
        return response_object(self.id, self.created_at, self.model, self.request, sampling=self.sampling, **fields)

    def recent(self) -> Optional[Recent]:
        """What a WebSocket keeps of this turn to continue from: a completed or incomplete one."""
        if self.final is None or self.final["status"] not in ("completed", "incomplete"):
            return None
        return Recent(self.id, self.conversation + self.final["output"], self.chain)

    async def complete(self, generation: ChatGeneration) -> dict[str, Any]:
        chunks = [chunk async for chunk in generation.chunks]
        choices, usage = collect_choices(chunks)
        total = choices.get(0, GenerationChunk())
        status, incomplete = finish_status(total.finish_reason)
        # The answer's tokens only: thinking and tool-call chunks carry theirs too.
        logprobs = [e for c in chunks if c.content for e in c.logprobs or ()] if self.request.wants_logprobs() else None
        output = output_items(total, logprobs)
        response = self.response(status=status, output=output, usage=usage, incomplete_details=incomplete)
        await self.keep(response)
        return response

    async def keep(self, response: dict[str, Any]) -> None:
        """A finished response stored (when asked), and its input and output appended to the
        conversation it answers."""
        if self.request.store:
            await self.serving.store(response, self.conversation, self.chain)
        await self.append(response)

    async def append(self, response: dict[str, Any]) -> None:
        conversation_id = self.request.conversation_id()
        if conversation_id is not None and response["status"] in ("completed", "incomplete"):
            await self.serving.append_turn(conversation_id, self.added + response["output"])

    async def in_background(self, generation: ChatGeneration) -> dict[str, Any]:
        """The response stored in progress and answered now; a task generates the rest
        (deployments/ingress/serving/background.py)."""
        response = self.response()
        run = background.BackgroundRun(self.serving.records, response, self.append)
        await self.serving.records.put(
            RESPONSES, self.id, run.record(response, self.conversation, self.chain), expected_version=0
        )
        run.start(generation.chunks)
        return response

    async def events(self, generation: ChatGeneration) -> AsyncIterator[dict[str, Any]]:
        """The response's stream events (dicts; each transport frames them); `final` is set
        before the last one."""
        stream = ResponseEvents(self.response())
        for event in stream.start():
            yield event
        finish_reason, usage = None, None
        try:
            # Closed with this generator: a client that leaves stops the generation at once.
            async with contextlib.aclosing(generation.chunks) as chunks:
                async for chunk in chunks:
                    for event in stream.feed(chunk):
                        yield event
                    finish_reason, usage = chunk.finish_reason or finish_reason, chunk.usage or usage
        except Exception as e:  # the answer began: the failure is reported in the stream
            failed = stream.fail(from_exception(e))
            self.final = stream.response
            for event in failed:
                yield event
            return
        last = stream.finish(finish_reason, usage)
        await self.keep(stream.response)  # before the final event: a client may read it right after
        self.final = stream.response
        for event in last:
            yield event
