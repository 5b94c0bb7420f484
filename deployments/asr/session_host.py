"""The streaming sessions an ASR replica holds: chunks in, Silero VAD, decodes out.

A session lives in the replica that created it; its id is `replica_key(replica id, token)`, so
the strict `SessionAffinityRouter` sends each of its requests back here (docs/routing.md). A sid
that names another replica reached this one only because that replica is gone: the session was
lost (410), never silently restarted. A sid naming this replica that is not in the table ended,
was reclaimed or never existed (404).

Pauses are found with Silero VAD (deployments/audio_models/silero_vad.py): its `feed()`
carries its LSTM state from chunk to chunk and costs milliseconds per chunk, and unlike the
energy VAD of whole files (relative to the loudest frame of the file, which a stream does not
know yet) it needs no look-ahead. It runs on its own single thread, in numpy, so it never waits
on the asyncio loop nor behind Whisper in MLX's one CPU op queue.

Finals go through `decode(engine, options, samples)`: the same batched path as POST
/v1/audio/transcriptions, so a finalised utterance reads exactly as that utterance sent as a
file, and concurrent sessions share Whisper forward passes. Partials go through `hypothesise`
(the engine's fast path: Whisper's encoder over the utterance's real length,
deployments/asr/hypothesis.py) in the background: a chunk is answered at once with the newest
hypothesis ready, so its round trip is the VAD's milliseconds, not a decode; a session has at
most one hypothesis in flight, and one of an utterance that has ended is cancelled or dropped.

A diarized session (created with a `SpeakerTrack`) also sends each finalised utterance to
`voices(samples)` (the replica's diarization engine: voice pieces and their GE2E embeddings);
the track clusters them (deployments/diarization/track.py), and the utterance's word times
place its segments (StreamSession.segments).

Ray-free: the deployment passes in its replica id and its decode, engine and voice lookups.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from deployments.asr.engine import TranscribeOptions
from deployments.asr.streaming import (
    RATE,
    Cut,
    SessionTable,
    StreamConfig,
    StreamSession,
    pcm16_samples,
    session_lost,
    session_not_found,
    sounds_complete,
)
from deployments.audio.resample import resample
from deployments.diarization.spans import Span
from deployments.diarization.track import SpeakerTrack
from deployments.routing.affinity import owner_of, replica_key

logger = logging.getLogger("ray.serve")

Decode = Callable[[Any, TranscribeOptions, np.ndarray], Awaitable[Any]]  # -> Transcript
Hypothesise = Callable[[Any, TranscribeOptions, np.ndarray], Awaitable[str]]
EngineFor = Callable[[str], Awaitable[Any]]
Voices = Callable[[np.ndarray], Awaitable[tuple[list[Span], np.ndarray]]]  # pieces, embeddings


@dataclass
class LiveSession:
    session: StreamSession
    options: TranscribeOptions
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    partial_task: Optional[asyncio.Task] = None  # the hypothesis being decoded: at most one
    utterance: int = 0  # utterances ended so far: a hypothesis of an earlier one is stale

    def partial_running(self) -> bool:
        return self.partial_task is not None and not self.partial_task.done()

    def end_utterance(self) -> None:
        """The open utterance ended (cut, commit, clear, session end): its hypothesis is stale."""
        if self.partial_running():
            self.partial_task.cancel()
        self.partial_task = None
        self.utterance += 1


class SileroStream:
    """Silero's streaming `feed`, on one thread of its own (MLX state is per thread)."""

    def __init__(self):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="silero-vad")

    async def feed(self, samples: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, _silero_feed, samples, state)


def _silero_feed(samples: np.ndarray, state: Any):
    from deployments.audio_models.silero_vad import default_vad

    return default_vad().feed(samples, state)


class SessionHost:
    def __init__(
        self,
        replica_id: str,
        decode: Decode,
        engine_for: EngineFor,
        max_sessions: int,
        idle_timeout_s: float,
        max_chunk_s: float,
        defaults: StreamConfig = StreamConfig(),
        vad: Any = None,
        hypothesise: Optional[Hypothesise] = None,
        voices: Optional[Voices] = None,
    ):
        self.replica_id = replica_id
        self._decode = decode
        self._hypothesise = hypothesise or self._decoded_text
        self._engine_for = engine_for
        self._voices = voices
        self.defaults = defaults
        self.max_chunk_bytes = int(max_chunk_s * RATE) * 2
        self.vad = vad or SileroStream()
        self.table = SessionTable(max_sessions, idle_timeout_s, lambda token: replica_key(replica_id, token))
        self._live: dict[str, LiveSession] = {}
        self.stats = {"created": 0, "finished": 0, "reclaimed": 0, "partials": 0, "finals": 0, "end_checks": 0}

    # ------------------------------------------------------------------ lifecycle

    async def create(
        self,
        engine: Any,
        options: TranscribeOptions,
        overrides: Optional[dict] = None,
        speakers: Optional[SpeakerTrack] = None,
    ) -> dict:
        """A new session; with `speakers`, a diarized one (the host needs `voices` for it)."""
        if speakers is not None and self._voices is None:
            raise ValueError("a diarized session needs the host's `voices`")
        config = StreamConfig(**{**self.defaults.__dict__, **(overrides or {})})
        self.reclaim()
        session = self.table.create(engine.model_id, config, speakers=speakers)
        self._live[session.sid] = LiveSession(session, options)
        self.stats["created"] += 1
        return {"sid": session.sid, "model": engine.model_id, "sample_rate": RATE}

    def _get(self, sid: str) -> LiveSession:
        self.reclaim()
        live = self._live.get(sid)
        if live is None:
            raise session_lost(sid) if owner_of(sid) not in (None, self.replica_id) else session_not_found(sid)
        return live

    def reclaim(self) -> None:
        for sid in self.table.reclaim():
            self._live.pop(sid, None)
            self.stats["reclaimed"] += 1
            logger.info("Streaming session %s reclaimed after %.0f s idle", sid, self.table.idle_timeout_s)

    def delete(self, sid: str) -> dict:
        live = self._get(sid)
        self._end(live)
        return {"sid": sid, "deleted": True}

    def _end(self, live: LiveSession) -> None:
        live.end_utterance()
        self.table.remove(live.session.sid)
        self._live.pop(live.session.sid, None)
        self.stats["finished"] += 1

    def sessions(self) -> dict:
        self.reclaim()
        return {"live": len(self.table), "sessions": [s.summary() for s in self.table]}

    def live_by_model(self) -> dict[str, int]:
        """Open sessions per model (the live-sessions gauge)."""
        self.reclaim()
        counts: dict[str, int] = {}
        for session in self.table:
            counts[session.model or ""] = counts.get(session.model or "", 0) + 1
        return counts

    def state(self, sid: str) -> dict:
        return self._get(sid).session.state()

    # ------------------------------------------------------------------ audio

    async def feed(self, sid: str, pcm: bytes, finish: bool = False) -> dict:
        """A chunk (possibly empty with finish): the session's state after it, with the events
        it caused (`speech_started`/`speech_stopped` in stream seconds, `finalised` utterances
        with their text, start and end, empty texts included)."""
        live = self._get(sid)
        samples = pcm16_samples(pcm, self.max_chunk_bytes) if (pcm or not finish) else np.zeros(0, np.float32)
        async with live.lock:
            session = live.session
            session.touch()
            events: dict[str, list] = {"speech_started": [], "speech_stopped": [], "finalised": []}
            if len(samples):
                probs, session.vad_state = await self.vad.feed(samples, session.vad_state)
                result = session.feed(samples, probs)
                events["speech_started"] = [round(x / RATE, 3) for x in result.speech_started]
                events["speech_stopped"] = [round(x / RATE, 3) for x in result.speech_stopped]
                cuts, partial_due, check = result.cuts, result.partial_due, result.end_check
            else:
                cuts, partial_due, check = [], False, False
            if finish:
                cut = session.commit()
                cuts = cuts + ([cut] if cut is not None else [])
                partial_due = False
            heard = {}  # cut -> its transcript, decoded already by a semantic check
            if check and not finish:
                ended = await self._end_if_complete(live)
                if ended is not None:
                    cut, stopped, heard[id(cut)] = ended
                    events["speech_stopped"].append(round(stopped / RATE, 3))
                    cuts, partial_due = cuts + [cut], False
            if cuts:
                live.end_utterance()
            for cut in cuts:
                events["finalised"].append(await self._finalise(live, cut, heard.get(id(cut))))
            if partial_due:
                self._start_partial(live)
            answer = {**session.state(utterance_final=bool(cuts), final=finish), **events}
            if finish:
                self._end(live)
            return answer

    async def commit(self, sid: str) -> dict:
        """End the open utterance now (Realtime manual commit); `committed` is the finalised
        utterance (text, start, end), None if nothing was buffered."""
        live = self._get(sid)
        async with live.lock:
            cut = live.session.commit()
            live.end_utterance()
            committed = await self._finalise(live, cut) if cut is not None else None
            return {**live.session.state(utterance_final=cut is not None), "committed": committed}

    async def clear(self, sid: str) -> dict:
        live = self._get(sid)
        async with live.lock:
            live.end_utterance()
            live.session.clear()
            return live.session.state()

    async def _end_if_complete(self, live: LiveSession):
        """A semantic pause (Realtime's semantic_vad): the open utterance decoded as it stands,
        and ended if its words sound finished; (cut, where speech stopped, transcript) then,
        else None (the utterance goes on until more speech or the longest pause)."""
        transcript = await self._transcribe(live, live.session.buffer.copy())
        self.stats["end_checks"] += 1
        if not sounds_complete(transcript.text):
            return None
        cut, stopped = live.session.end_turn()
        return cut, stopped, transcript

    async def _finalise(self, live: LiveSession, cut: Cut, transcript=None) -> dict:
        """The cut utterance decoded (unless `transcript` is its decode already) and kept."""
        transcript = transcript or await self._transcribe(live, cut.audio)
        text = transcript.text.strip()
        session = live.session
        if session.speakers is not None and text:  # an empty text is noise: no voice to learn
            pieces, embeddings = await self._voices(cut.audio)
            session.speakers.add(cut.start / RATE, pieces, embeddings)
        session.finalised(cut, text, transcript.words() if session.speakers is not None else None)
        self.stats["finals"] += 1
        final = {"text": text, "start": round(cut.start / RATE, 3), "end": round(cut.end / RATE, 3)}
        if session.speakers is not None:  # provisional: the clustering of what was heard so far
            final["speaker"] = session.opening_speaker()
        if live.options.logprobs:
            final["logprobs"] = transcript.logprobs()
        return final

    def _start_partial(self, live: LiveSession) -> None:
        """Decode a hypothesis of the open utterance in the background, unless one is in
        flight (then the next is due again as soon as it is done)."""
        if live.partial_running():
            return
        live.session.partial_started()
        audio = live.session.buffer.copy()
        live.partial_task = asyncio.create_task(self._refresh_partial(live, audio, live.utterance))

    async def _refresh_partial(self, live: LiveSession, samples: np.ndarray, utterance: int) -> None:
        try:
            engine, samples = await self._engine_audio(live, samples)
            text = await self._hypothesise(engine, live.options, samples)
        except asyncio.CancelledError:
            raise
        except Exception:  # a partial is provisional: the final still decodes this audio
            logger.exception("The partial hypothesis of streaming session %s failed", live.session.sid)
            return
        if live.utterance == utterance:
            live.session.set_partial(text)
            self.stats["partials"] += 1

    async def _transcribe(self, live: LiveSession, samples: np.ndarray):
        engine, samples = await self._engine_audio(live, samples)
        return await self._decode(engine, live.options, samples)

    async def _engine_audio(self, live: LiveSession, samples: np.ndarray) -> tuple[Any, np.ndarray]:
        engine = await self._engine_for(live.session.model)
        if engine.sample_rate != RATE:
            samples = resample(samples, RATE, engine.sample_rate)
        return engine, samples

    async def _decoded_text(self, engine: Any, options: TranscribeOptions, samples: np.ndarray) -> str:
        """Hypotheses without a fast path: the final's decode."""
        return (await self._decode(engine, options, samples)).text
