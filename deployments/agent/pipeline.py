"""The agent's pipeline: speak each sentence while the LLM writes the next.

`speak_while_writing` reads sentences from one stream (the LLM's, cut by `sentences_of`) on its
own task and synthesizes them in order on the caller's, so synthesis of sentence N overlaps
generation of sentence N+1 across the two deployments. The events it yields are the SSE
payloads of POST /v1/agent/stream: each sentence's `text`, then its `audio` chunks as the
synthesis yields them.

Leaving early (a client hang-up, an error) stops both sides: the writer task is cancelled,
which closes the LLM stream, and the synthesis in progress is closed. An error on either side
ends the events with that error raised.

Pure asyncio: no Ray, no MLX; the two streams are injected.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from deployments.agent.sentences import speakable

Synthesize = Callable[[str], AsyncGenerator[bytes, None]]

_END = object()


def text_event(sentence: str) -> dict[str, Any]:
    return {"type": "text", "text": sentence}


def audio_event(pcm: bytes) -> dict[str, Any]:
    return {"type": "audio", "delta": base64.b64encode(pcm).decode("ascii")}


async def _write(sentences: AsyncGenerator[str, None], queue: asyncio.Queue) -> None:
    try:
        async with contextlib.aclosing(sentences):
            async for sentence in sentences:
                await queue.put(sentence)
    except Exception as e:  # handed to the reader, which raises it in order
        await queue.put(e)
    else:
        await queue.put(_END)


async def speak_while_writing(
    sentences: AsyncGenerator[str, None], synthesize: Synthesize
) -> AsyncIterator[dict[str, Any]]:
    """`text` then `audio` events per sentence; sentences keep coming while one is spoken."""
    queue: asyncio.Queue = asyncio.Queue()
    writer = asyncio.create_task(_write(sentences, queue))
    try:
        while (item := await queue.get()) is not _END:
            if isinstance(item, Exception):
                raise item
            yield text_event(item)
            if not speakable(item):
                continue
            async with contextlib.aclosing(synthesize(item)) as audio:
                async for pcm in audio:
                    yield audio_event(pcm)
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
