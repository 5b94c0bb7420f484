"""Stand-ins for the deployments behind the ingress, for in-process tests of the ingress's own
logic (validation, routing, response assembly, errors): `create_app()` over these answers
through httpx's ASGITransport with no Ray. What crosses deployments is tested end to end
(tests/e2e). A fake answers only the calls a test gives it an answer for; any other call
fails loudly, so a test also proves which requests never reach a slot."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import Any, Optional

import numpy as np

from deployments.asr.transcript import Segment, Transcript
from deployments.ingress.clients import SlotStream
from deployments.protocol.embeddings import EmbeddingResponse, embedding_response
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import UsageInfo
from deployments.protocol.speech import SpeechChunk

SAMPLE_RATE = 24000


class SlotNotExpected(APIError):
    """A call the test gave no answer for: 418, so it can never pass for a real answer."""

    def __init__(self, method: str):
        super().__init__(418, f"the fake slot was called: {method}", "test_error", None, "slot_called")


class FakeStream:
    """What a streaming handle call returns: an async iterator that can be cancelled. An
    awaitable item is awaited (a slow stream: `asyncio.sleep(s, result=chunk)`)."""

    def __init__(self, items: Iterable[Any]):
        self._items = iter(items)
        self.cancelled = False
        self.finished = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.sleep(0)
        item = next(self._items, StopAsyncIteration)
        if inspect.isawaitable(item):
            item = await item
        if item is StopAsyncIteration:
            self.finished = True
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True

    @property
    def in_flight(self) -> bool:
        """Still running in the (fake) deployment: neither read to its end nor cancelled."""
        return not (self.finished or self.cancelled)


class FakeClient:
    """Speaks the ingress's client interface (`call`, `stream`) with canned answers."""

    def __init__(self, **answers: Callable[..., Any]):
        self.answers = dict(answers)
        self.calls: list[tuple[str, tuple, Optional[str]]] = []
        self.streams: list[FakeStream] = []
        self.sessions: list[Optional[str]] = []  # the routing key of each call

    async def call(self, method: str, *args: Any, model: Optional[str] = None, session: Optional[str] = None) -> Any:
        self.calls.append((method, args, model))
        self.sessions.append(session)
        answer = self._answer(method)(*args, model=model)
        return await answer if inspect.isawaitable(answer) else answer

    async def stream(
        self, method: str, *args: Any, model: Optional[str] = None, session: Optional[str] = None
    ) -> SlotStream:
        self.calls.append((method, args, model))
        self.sessions.append(session)
        stream = FakeStream(self._answer(method)(*args, model=model))
        self.streams.append(stream)
        return await SlotStream.start(stream)

    def _answer(self, method: str) -> Callable[..., Any]:
        answer = self.answers.get(method)
        if answer is None:
            raise SlotNotExpected(method)
        return answer


# ------------------------------------------------------------------ plausible slot answers


def generation(text: str = "Hello there", served_by: str = "ominix-tiny-qwen3") -> Callable[..., list]:
    """An LLM stream: one chunk per word (the first names the model), then finish and usage."""

    def answer(request, *images, model: Optional[str] = None) -> list[GenerationChunk]:  # images: the VLM's
        words = text.split(" ")
        chunks = [GenerationChunk(content=(" " if i else "") + w) for i, w in enumerate(words)]
        chunks[0].model = model or served_by
        usage = UsageInfo(prompt_tokens=3, completion_tokens=len(words), total_tokens=3 + len(words))
        return [*chunks, GenerationChunk(finish_reason="stop", usage=usage)]

    return answer


def slowly(answer: Callable[..., Iterable], delay_s: float, cancelled_as=None) -> Callable[..., Iterable]:
    """`answer`'s chunks, each after `delay_s` (a stream still running when a test acts).
    `cancelled_as`: the exception a cancelled read raises instead (a Ray handle's stream raises
    concurrent.futures.CancelledError, an Exception, not asyncio's)."""

    async def later(chunk):
        try:
            return await asyncio.sleep(delay_s, result=chunk)
        except asyncio.CancelledError:
            if cancelled_as is None:
                raise
            raise cancelled_as() from None

    def slow(*args, model: Optional[str] = None) -> Iterable:
        return (later(chunk) for chunk in answer(*args, model=model))

    return slow


def speech(seconds: float = 0.1) -> Callable[..., list]:
    def answer(params, model: Optional[str] = None) -> list[SpeechChunk]:
        samples = (0.1 * np.sin(np.arange(int(seconds * SAMPLE_RATE)) / 10)).astype("<f4")
        return [SpeechChunk(sample_rate=SAMPLE_RATE), SpeechChunk(sample_rate=SAMPLE_RATE, samples=samples.tobytes())]

    return answer


def tts_facts(params=None, model: Optional[str] = None) -> dict:
    return {
        "model": model or "ominix-tiny-pocket-tts",
        "model_type": "pocket_tts",
        "sample_rate": SAMPLE_RATE,
        "presets": ["alba"],
        "max_input_chars": 4096,
        "ws_idle_timeout_s": 120.0,
    }


def transcript(text: str = "hello world") -> Callable[..., Transcript]:
    def answer(params, audio, server_path, model: Optional[str] = None) -> Transcript:
        return Transcript.join([Segment(id=0, start=0.0, end=1.0, text=text)], "en", 1.0)

    return answer


# ------------------------------------------------------------------ streaming sessions


class LoudVAD:
    """A stand-in for Silero's `feed`: speech where a 512-sample window is loud (|x| > 0.05)."""

    async def feed(self, samples, state):
        pending = np.concatenate([state if state is not None else np.zeros(0, np.float32), samples])
        n = len(pending) // 512
        windows = pending[: n * 512].reshape(n, 512) if n else np.zeros((0, 512))
        return (np.abs(windows).max(axis=1) > 0.05).astype(float), pending[n * 512 :]


class Engine:
    model_id = "whisper-tiny.en"
    sample_rate = 16000


def pcm(seconds: float, loud: bool, rate: int = 16000, level: int = 8000) -> bytes:
    return np.full(int(seconds * rate), level if loud else 0, "<i2").tobytes()


async def level_voices(samples):
    """A stand-in for the speaker encoder: an utterance is one voice piece, and its "voice" is
    its level (pcm(level=8000) is one speaker, any louder level the other)."""
    from deployments.diarization.spans import Span

    voice = [1.0, 0.0] if np.abs(samples).max() < 0.3 else [0.0, 1.0]
    return [Span(0.0, len(samples) / 16000)], np.array([voice])


def session_host(**kwargs):
    """A real SessionHost over the LoudVAD and a decoder that says how long each audio was;
    the second value lists the decoded lengths (samples)."""
    from deployments.asr.session_host import SessionHost

    decoded: list[int] = []

    async def decode(engine, options, samples):
        decoded.append(len(samples))
        return Transcript.join([Segment(0, 0.0, 0.0, f"utterance of {len(samples) / 16000:.2f} s")], "en", 0.0)

    async def engine_for(model):
        return Engine()

    defaults = dict(max_sessions=4, idle_timeout_s=600, max_chunk_s=10, vad=LoudVAD(), voices=level_voices)
    return SessionHost("r1", decode, engine_for, **{**defaults, **kwargs}), decoded


def streaming_asr(host) -> FakeClient:
    """An ASR slot client whose session calls reach `host` (one replica)."""
    from deployments.asr.engine import TranscribeOptions
    from deployments.diarization.track import SpeakerTrack

    return FakeClient(
        stream_create=lambda language, overrides, diarize=False, prompt=None, logprobs=False, model=None: host.create(
            Engine(),
            TranscribeOptions(language, prompt=prompt, logprobs=logprobs),
            overrides,
            SpeakerTrack() if diarize else None,
        ),
        stream_feed=lambda sid, pcm, finish=False, model=None: host.feed(sid, pcm, finish),
        stream_commit=lambda sid, model=None: host.commit(sid),
        stream_clear=lambda sid, model=None: host.clear(sid),
        stream_state=lambda sid, model=None: host.state(sid),
        stream_delete=lambda sid, model=None: host.delete(sid),
        stream_sessions=lambda model=None: {"replica": "r1", **host.sessions()},
    )


def embeddings(dimensions: int = 4) -> Callable[..., EmbeddingResponse]:
    """One unit vector per input, in the encoding the request asks for."""

    def answer(request, model: Optional[str] = None) -> EmbeddingResponse:
        inputs = request.inputs()
        vectors = [np.eye(dimensions, dtype=np.float32)[i % dimensions] for i in range(len(inputs))]
        tokens = sum(len(i) if isinstance(i, list) else len(i.split()) for i in inputs)
        return embedding_response(vectors, model or "ominix-all-minilm-l6-v2", tokens, request.encoding_format)

    return answer


# ------------------------------------------------------------------ the graph's records


class RecordsControl(FakeClient):
    """Control's record calls, answered by the real RecordService over a real RecordStore
    (what deployments/control/deployment.py does): the store every ingress replica shares."""

    def __init__(self, store):
        from deployments.records import RecordService

        service = RecordService(store)
        self.store = store
        super().__init__(
            **{
                method: (lambda method: lambda *args, model=None: getattr(service, method)(*args))(method)
                for method in ("record_get", "record_list", "record_put", "record_delete")
            }
        )
