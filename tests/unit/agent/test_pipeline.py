"""The agent pipeline: sentence N is spoken while sentence N+1 is written; leaving early or an
error on either side stops both."""

import asyncio
import base64

import pytest

from deployments.agent.pipeline import speak_while_writing


class Writer:
    """An LLM-like sentence stream that records how far it got and whether it was closed."""

    def __init__(self, sentences, fail_after=None, hang=False):
        self.sentences, self.fail_after, self.hang = sentences, fail_after, hang
        self.written: list[str] = []
        self.closed = asyncio.Event()
        self.second_written = asyncio.Event()

    async def stream(self):
        try:
            for i, sentence in enumerate(self.sentences):
                if self.fail_after is not None and i == self.fail_after:
                    raise RuntimeError("the LLM failed")
                await asyncio.sleep(0.01)
                self.written.append(sentence)
                if len(self.written) == 2:
                    self.second_written.set()
                yield sentence
            if self.hang:  # an LLM still writing
                await asyncio.sleep(3600)
        finally:
            self.closed.set()


def audio_of(events):
    return [base64.b64decode(e["delta"]) for e in events if e["type"] == "audio"]


async def test_events_are_each_sentence_then_its_audio_in_order():
    writer = Writer(["One.", "Two.", "---"])

    async def synthesize(text):
        for part in (b"a", b"b"):
            yield text.encode() + part

    events = [e async for e in speak_while_writing(writer.stream(), synthesize)]
    assert [e["type"] for e in events] == ["text", "audio", "audio", "text", "audio", "audio", "text"]
    assert [e["text"] for e in events if e["type"] == "text"] == ["One.", "Two.", "---"]  # "---": nothing to say
    assert audio_of(events) == [b"One.a", b"One.b", b"Two.a", b"Two.b"]


async def test_the_next_sentence_is_written_while_one_is_spoken():
    """The first synthesis waits for the writer's second sentence: a pipeline that wrote only
    between syntheses would never get there (the wait times out)."""
    writer = Writer(["First sentence.", "Second sentence.", "Third."])
    overlapped = []

    async def synthesize(text):
        if text == "First sentence.":
            await asyncio.wait_for(writer.second_written.wait(), 2)
            overlapped.append(text)
        yield b"\x00\x00"

    events = [e async for e in speak_while_writing(writer.stream(), synthesize)]
    assert overlapped == ["First sentence."]
    assert len(audio_of(events)) == 3


async def test_leaving_early_closes_the_writer_and_the_synthesis():
    writer = Writer(["Only one."], hang=True)
    synthesis_closed = asyncio.Event()

    async def synthesize(text):
        try:
            while True:
                yield b"\x01\x00"
                await asyncio.sleep(0.01)
        finally:
            synthesis_closed.set()

    events = speak_while_writing(writer.stream(), synthesize)
    assert (await events.__anext__())["type"] == "text"
    assert (await events.__anext__())["type"] == "audio"
    await events.aclose()  # the client hung up
    await asyncio.wait_for(synthesis_closed.wait(), 1)
    await asyncio.wait_for(writer.closed.wait(), 1)


async def test_cancelling_the_consumer_task_stops_both():
    writer = Writer(["Only one."], hang=True)
    synthesis_closed = asyncio.Event()
    started = asyncio.Event()

    async def synthesize(text):
        try:
            started.set()
            await asyncio.sleep(3600)
            yield b""
        finally:
            synthesis_closed.set()

    async def consume():
        async for _ in speak_while_writing(writer.stream(), synthesize):
            pass

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert synthesis_closed.is_set() and writer.closed.is_set()


async def test_a_writer_error_arrives_after_the_sentences_before_it():
    writer = Writer(["One.", "Two.", "Three."], fail_after=2)

    async def synthesize(text):
        yield b"x"

    seen = []
    with pytest.raises(RuntimeError, match="the LLM failed"):
        async for event in speak_while_writing(writer.stream(), synthesize):
            seen.append(event)
    assert [e.get("text") for e in seen if e["type"] == "text"] == ["One.", "Two."]


async def test_a_synthesis_error_stops_the_writer():
    writer = Writer(["One."], hang=True)

    async def synthesize(text):
        raise ValueError("the TTS failed")
        yield b""

    with pytest.raises(ValueError, match="the TTS failed"):
        async for _ in speak_while_writing(writer.stream(), synthesize):
            pass
    await asyncio.wait_for(writer.closed.wait(), 1)
