"""The ASR slot as a Ray Serve deployment: a thin adapter from Serve to `ASREngine`.

A request's audio is decoded here (in a worker thread), then joins a `@serve.batch` queue
whose size and wait window come from the batching mode (ASR_MODE / ASR_MAX_BATCH). Each
batch is split by model and decoding options, and each part is one call to the engine: one
batched forward pass for whisper. Models are multiplexed per replica as in the LLM slot.

Speaker diarization runs here too, on a `DiarizationEngine` thread of its own (Silero VAD and
the GE2E encoder, ~6 MB, loaded on the first diarized request): the decoded samples and the
transcript's word times are already in this process, so nothing crosses a handle twice,
and diarized transcriptions scale with the ASR slot's replicas. /v1/audio/diarization (no
transcript) uses the same engine.

Streaming sessions (MiniInfer's /v1/audio/stream/sessions, the Realtime WebSocket) live in the
replica that created them (`SessionHost`); their decodes join the same batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from ray import serve

from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions, group_by_options
from deployments.asr.formats import diarized_json, segment_id
from deployments.asr.limits import check_duration, check_upload_size, read_server_file
from deployments.asr.metrics import TranscriptionMetrics
from deployments.asr.session_host import SessionHost
from deployments.asr.slot import SLOT
from deployments.asr.streaming import StreamConfig
from deployments.asr.transcript import Segment, Transcript
from deployments.audio.decode import AudioDecodeError, decode_audio
from deployments.diarization.config import SpeakerCount
from deployments.diarization.engine import DiarizationEngine, DiarizeJob, VoicesJob
from deployments.diarization.spans import Diarization, Span
from deployments.diarization.track import SpeakerTrack
from deployments.protocol.errors import invalid_request
from deployments.protocol.transcription import DiarizationParams, SpeakerOptions, TranscriptionParams
from deployments.slot_replica import SlotReplica

logger = logging.getLogger("ray.serve")


@dataclass
class _Job:
    """One request inside a batch."""

    engine: ASREngine
    options: TranscribeOptions
    samples: np.ndarray


@serve.deployment
class ASRSlot(SlotReplica):
    slot = SLOT
    file_patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.py"]
    metrics_class = TranscriptionMetrics

    async def setup(self) -> None:
        self._diarizer: Optional[DiarizationEngine] = None
        self._diarizer_lock = asyncio.Lock()
        self.batch_sizes: dict[int, int] = defaultdict(int)  # batch size -> how many batches
        mode = self.config.batching()
        self._batched.set_max_batch_size(mode.max_batch_size)
        self._batched.set_batch_wait_timeout_s(mode.wait_s)
        logger.info(
            "ASR batching mode %s: batches of up to %d, %.0f ms wait",
            mode.name,
            mode.max_batch_size,
            mode.wait_s * 1000,
        )
        self.streams = SessionHost(
            serve.get_replica_context().replica_id.unique_id,
            decode=self._decode_samples,
            engine_for=self.models.use,
            max_sessions=self.config.stream_max_sessions,
            idle_timeout_s=self.config.stream_idle_timeout_s,
            max_chunk_s=self.config.stream_max_chunk_s,
            defaults=StreamConfig(
                partial_every_s=self.config.stream_partial_every_s, pause_s=self.config.stream_pause_s
            ),
            hypothesise=lambda engine, options, samples: engine.hypothesis(samples, options),
            voices=self._utterance_voices,
        )
        self._reclaimer = asyncio.create_task(self._reclaim_idle_sessions())

    async def _reclaim_idle_sessions(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, self.config.stream_idle_timeout_s / 4))
            self.streams.reclaim()

    def sample_gauges(self) -> None:
        self.metrics.live_sessions(self.models.loaded(), self.streams.live_by_model())

    async def start_engine(self, model_id: str, model_dir: Path) -> ASREngine:
        engine_config = EngineConfig(
            dtype=self.config.dtype,
            max_chunk_s=self.config.max_chunk_s,
            vad=self.config.vad,
            cpu_kernels=self.config.cpu_kernels,
            max_windows_per_pass=max(32, self.config.batching().max_batch_size),
        )
        return await ASREngine.start(model_id, model_dir, engine_config)

    async def transcribe(
        self,
        params: TranscriptionParams,
        audio: Optional[bytes] = None,
        server_path: Optional[str] = None,
        references: Optional[dict[str, np.ndarray]] = None,
    ) -> Transcript:
        """Transcribe uploaded bytes, or a file under the configured `files_dir`; with
        `params.diarized`, label each segment's speaker (`references`: known speakers' 16 kHz
        clips, by name)."""
        started = time.perf_counter()
        diarizer = await self.diarizer() if params.diarized else None
        engine, options, samples = await self._request_audio(params, audio, server_path)
        result = await self._decode_samples(engine, options, samples)
        if diarizer is not None:
            speakers = await self._diarize(diarizer, samples, engine.sample_rate, params, references)
            result.label_speakers(speakers.speaker_of, speakers.labels_of)
        self.metrics.transcribed(engine.model_id, len(samples) / engine.sample_rate, time.perf_counter() - started)
        return result

    async def transcribe_stream(
        self,
        params: TranscriptionParams,
        audio: Optional[bytes] = None,
        server_path: Optional[str] = None,
        references: Optional[dict[str, np.ndarray]] = None,
    ) -> AsyncIterator[dict]:
        """OpenAI's streamed transcription: a `transcript.text.delta` per decoded window, then
        `transcript.text.done` with the whole text (the same as `transcribe`'s) and the usage.

        Diarized (`diarized_json`): the deltas name their segment (`segment_id`) as they are
        decoded; speakers need the whole recording's clustering, so the labelled
        `transcript.text.segment` events follow the last delta, in order, then the done event."""
        started = time.perf_counter()
        diarizer = await self.diarizer() if params.diarized else None
        engine, options, samples = await self._request_audio(params, audio, server_path)
        duration = len(samples) / engine.sample_rate
        decoded: list[Segment] = []
        async for segments in engine.transcribe_windows(samples, options):
            for segment in (s for s in segments if s.text.strip()):
                delta = {"type": "transcript.text.delta", "delta": (" " if decoded else "") + segment.text.strip()}
                if options.logprobs:
                    delta["logprobs"] = segment.logprobs or []
                if diarizer is not None:
                    delta["segment_id"] = segment_id(len(decoded))
                yield delta
                decoded.append(segment)
        result = Transcript.join(decoded, options.language, duration)
        if diarizer is not None:
            speakers = await self._diarize(diarizer, samples, engine.sample_rate, params, references)
            result.label_speakers(speakers.speaker_of, speakers.labels_of)
            for event in diarized_json(result)["segments"]:
                yield event
        self.metrics.transcribed(engine.model_id, duration, time.perf_counter() - started)
        usage = {"type": "duration", "seconds": round(duration, 3)}
        done = {"type": "transcript.text.done", "text": result.text, "usage": usage}
        yield {**done, "logprobs": result.logprobs()} if options.logprobs else done

    async def _request_audio(
        self, params: TranscriptionParams, audio: Optional[bytes], server_path: Optional[str]
    ) -> tuple[ASREngine, TranscribeOptions, np.ndarray]:
        """The request's engine, options and decoded samples; bad requests fail here."""
        engine = await self.engine()
        options = TranscribeOptions(
            language=params.language,
            prompt=params.prompt,
            temperature=params.temperature,
            # Diarized: word times, so segments are timed as the words are and cut where the
            # speaker changes (Transcript.label_speakers); the words are shown only if asked.
            word_timestamps=params.word_timestamps or params.diarized,
            task=params.task,
            logprobs=params.logprobs,
        )
        engine.check_options(options)
        if audio is None:
            audio = await asyncio.to_thread(
                read_server_file, server_path or "", self.config.files_dir, self.config.max_upload_mb
            )
        return engine, options, await self._decode(audio, engine.sample_rate)

    async def _decode_samples(self, engine: ASREngine, options: TranscribeOptions, samples: np.ndarray) -> Transcript:
        """Decoded audio through the batch queue (files and streaming sessions alike)."""
        result = await self._batched(_Job(engine, options, samples))
        if isinstance(result, BaseException):
            raise result
        return result

    # ------------------------------------------------------------------ streaming sessions

    async def stream_create(
        self,
        language: Optional[str] = None,
        overrides: Optional[dict] = None,
        diarize: bool = False,
        prompt: Optional[str] = None,
        logprobs: bool = False,
    ) -> dict:
        """A new session on the request's model; its sid names this replica. `diarize`: each
        segment gets a speaker (the diarization engine starts here, so turned off is a 400 now)."""
        engine = await self.engine()
        # Diarized: word times, so each utterance's segments are timed by its words and cut
        # where the speaker changes (StreamSession.segments).
        options = TranscribeOptions(language=language, prompt=prompt, word_timestamps=diarize, logprobs=logprobs)
        engine.check_options(options)
        speakers = None
        if diarize:
            await self.diarizer()
            speakers = SpeakerTrack(self.config.diarization_config())
        return await self.streams.create(engine, options, overrides, speakers)

    async def _utterance_voices(self, samples: np.ndarray) -> tuple[list[Span], np.ndarray]:
        """A diarized session's utterance (16 kHz): its voice pieces and their embeddings."""
        diarizer = await self.diarizer()
        return await diarizer.voices(VoicesJob(samples, self.config.diarization_config()))

    async def stream_feed(self, sid: str, pcm: bytes, finish: bool = False) -> dict:
        return await self.streams.feed(sid, pcm, finish)

    async def stream_commit(self, sid: str) -> dict:
        return await self.streams.commit(sid)

    async def stream_clear(self, sid: str) -> dict:
        return await self.streams.clear(sid)

    async def stream_state(self, sid: str) -> dict:
        return self.streams.state(sid)

    async def stream_delete(self, sid: str) -> dict:
        return self.streams.delete(sid)

    async def stream_sessions(self) -> dict:
        return {"replica": self.streams.replica_id, **self.streams.sessions()}

    async def diarize(
        self, params: DiarizationParams, audio: bytes, references: Optional[dict[str, np.ndarray]] = None
    ) -> Diarization:
        """Who spoke when in uploaded bytes (POST /v1/audio/diarization)."""
        diarizer = await self.diarizer()
        samples = await self._decode(audio, 16000)
        return await self._diarize(diarizer, samples, 16000, params, references)

    async def diarizer(self) -> DiarizationEngine:
        """This replica's diarization engine, started on first use."""
        if not self.config.diarization:
            raise invalid_request(
                "Speaker diarization is turned off on this server (asr.diarization: false).",
                "diarize",
                "diarization_unavailable",
            )
        async with self._diarizer_lock:
            if self._diarizer is None or self._diarizer.thread_died():
                self._diarizer = await DiarizationEngine.start()
        return self._diarizer

    async def _diarize(
        self,
        diarizer: DiarizationEngine,
        samples: np.ndarray,
        rate: int,
        options: SpeakerOptions,
        references: Optional[dict[str, np.ndarray]],
    ) -> Diarization:
        count = SpeakerCount(options.num_speakers, options.min_speakers, options.max_speakers)
        job = DiarizeJob(samples, rate, self.config.diarization_config(), count, references or {})
        return await diarizer.diarize(job)

    async def _decode(self, data: bytes, sample_rate: int) -> np.ndarray:
        check_upload_size(len(data), self.config.max_upload_mb)
        try:
            samples = await asyncio.to_thread(decode_audio, data, sample_rate)
        except AudioDecodeError as e:
            raise invalid_request(str(e), "file", "invalid_audio") from None
        check_duration(len(samples) / sample_rate, self.config.max_duration_s)
        return samples

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.025)  # replaced in __init__ from the mode
    async def _batched(self, jobs: list[_Job]) -> list[Transcript | BaseException]:
        self.batch_sizes[len(jobs)] += 1
        results: list[Transcript | BaseException] = [None] * len(jobs)  # type: ignore[list-item]
        for indices in group_by_options([(id(job.engine), job.options) for job in jobs]):
            first = jobs[indices[0]]
            try:
                transcripts = await first.engine.transcribe([jobs[i].samples for i in indices], first.options)
            except BaseException as e:  # every member of the failed group gets the error
                transcripts = [e] * len(indices)
            for i, transcript in zip(indices, transcripts):
                results[i] = transcript
        return results

    def stats(self) -> dict:
        """Batches seen by size, each engine's forward-pass counters, and the diarizer's."""
        return {
            "batch_sizes": dict(self.batch_sizes),
            "streams": dict(self.streams.stats),
            "engines": {e.model_id: dict(e.stats) for e in self.models.engines()},
            "diarization": dict(self._diarizer.stats) if self._diarizer is not None else None,
        }
