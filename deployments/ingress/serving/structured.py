"""Structured answers checked against their schemas as sent, and resampled within a budget: the
check-and-retry around the LLM slot's constrained decoding, for every protocol that carries a
schema (chat and text completions, and the Responses and Messages APIs, which open the chat path).

The grammar enforces what llguidance can (deployments/llm/constraints.py); what it leaves out
(`uniqueItems`, `not`, `if`/`then`/`else`, oneOf's "exactly one"...) is checked here on each
finished choice (deployments/llm/answer_check.py). A choice that fails is generated again: a new
slot call for the failed choices together, with another seed (a greedy request samples its retries
at a small temperature), up to `llm.schema_attempts` attempts in all; a choice that never passes
ends with finish_reason `schema_not_met` and no answer. A choice cut by max_tokens is not checked:
it ends with `length`, as it would unconstrained.

Streaming: a choice whose schema leaves something to the check is held back until it passes (what
was sent cannot be taken back), then sent as it was generated; a choice whose grammar is the whole
schema streams as it is generated and is still checked at its end (a failure there, which the
grammar should make impossible, ends it with `schema_not_met` after its text). An answer that is
not streamed is always held: it is resampled whatever failed.

Usage counts every token generated, the rejected attempts' too (they were computed), and the
prompt once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Optional

from deployments.llm.answer_check import SCHEMA_NOT_MET, AnswerCheck
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import UsageInfo

logger = logging.getLogger(__name__)

DEFAULT_SCHEMA_ATTEMPTS = 4  # llm.schema_attempts when the slot's catalog entry does not say

# Opens attempt `attempt` (2, 3, ...) for `choices` choices: the slot's stream (SlotStream).
OpenAttempt = Callable[[int, int], Awaitable[Any]]


class CheckedStream:
    """A slot stream's interface (`first`, `chunks()`) over the attempts of one constrained request:
    the chunks of the choices that pass their check, choice indices as the request numbered them,
    the usage of every attempt on the last chunk. `streamed`: the client reads the chunks as they
    come (else every choice is held until it passes)."""

    def __init__(
        self,
        stream: Any,
        check: AnswerCheck,
        open_attempt: OpenAttempt,
        attempts: int,
        streamed: bool = True,
        record: Callable[[str], None] = lambda result: None,
    ):
        self._stream = stream
        self.first = stream.first
        self.check = check
        self.open_attempt = open_attempt
        self.attempts = attempts
        self.hold = check.held or not streamed
        self.record = record  # a check's result: valid, resampled, not_met, cut
        self.usage: Optional[UsageInfo] = None

    async def chunks(self) -> AsyncIterator[GenerationChunk]:
        pending: Optional[GenerationChunk] = None  # a choice's last chunk: the very last one gets the usage
        stream, indices, attempt = self._stream, None, 1
        while stream is not None:
            failed: list[int] = []
            async with aclosing(self._attempt(stream, indices, attempt, failed)) as chunks:
                async for chunk in chunks:
                    if pending is not None:
                        yield pending
                        pending = None
                    if chunk.finish_reason is None:
                        yield chunk
                    else:
                        pending = chunk
            stream, indices = None, failed
            if failed:
                attempt += 1
                stream = await self.open_attempt(len(failed), attempt)
        if pending is None and self.usage is not None:  # the usage came without a choice's end
            pending = GenerationChunk()
        if pending is not None:
            pending.usage = self.usage
            yield pending

    async def _attempt(
        self, stream: Any, indices: Optional[list[int]], attempt: int, failed: list[int]
    ) -> AsyncIterator[GenerationChunk]:
        """One attempt's chunks, renumbered (its choice i is the request's `indices[i]`), a held
        choice's released once it passes; the indices of the choices to resample go to `failed`."""
        held: dict[int, list[GenerationChunk]] = {}
        totals: dict[int, GenerationChunk] = {}
        async with aclosing(stream.chunks()) as parts:
            async for part in parts:
                self._count(part.usage)
                index = part.index if indices is None else indices[part.index]
                chunk = part.model_copy(update={"index": index, "usage": None})
                totals[index] = totals[index].merge(chunk) if index in totals else chunk
                if chunk.finish_reason is None:
                    if self.hold:
                        held.setdefault(index, []).append(chunk)
                    else:
                        yield chunk
                    continue
                # Off the event loop: a large schema takes milliseconds, a client's pattern maybe more.
                problem = await asyncio.to_thread(self.check.verdict, totals[index])
                for out in self._finished(chunk, problem, held.pop(index, []), attempt, failed):
                    yield out

    def _finished(
        self,
        chunk: GenerationChunk,
        problem: Optional[str],
        kept: list[GenerationChunk],
        attempt: int,
        failed: list[int],
    ) -> list[GenerationChunk]:
        """What goes out for a choice's last chunk, given its check's verdict (`problem`): the
        choice, if it passes; nothing, if it is to be resampled (its index joins `failed`); else
        its end with finish_reason schema_not_met."""
        if problem is None:
            self.record("cut" if chunk.finish_reason == "length" else "valid")
            return [*kept, chunk]
        if self.hold and attempt < self.attempts:
            self.record("resampled")
            logger.info("A structured answer failed its schema (attempt %d, resampled): %s", attempt, problem)
            failed.append(chunk.index)
            return []
        self.record("not_met")
        if self.hold:
            logger.info("A structured answer failed its schema (attempt %d, the last): %s", attempt, problem)
            return [GenerationChunk(index=chunk.index, finish_reason=SCHEMA_NOT_MET)]
        # Its text is out already: its grammar was the whole schema, so only what a grammar cannot
        # exclude gets here (a map's key written twice; llguidance and the validator disagreeing),
        # and the end says so.
        logger.warning("A streamed structured answer failed its schema after it was sent: %s", problem)
        return [chunk.model_copy(update={"finish_reason": SCHEMA_NOT_MET})]

    def _count(self, usage: Optional[UsageInfo]) -> None:
        """Every attempt's completion tokens; the prompt (and its cached part) once, the first's."""
        if usage is None:
            return
        if self.usage is None:
            self.usage = usage.model_copy(deep=True)
            return
        self.usage.completion_tokens += usage.completion_tokens
        self.usage.total_tokens = self.usage.prompt_tokens + self.usage.completion_tokens


def attempts_budget(options: dict[str, Any]) -> int:
    """The LLM slot's `schema_attempts` from its catalog options."""
    return int(options.get("schema_attempts", DEFAULT_SCHEMA_ATTEMPTS))
