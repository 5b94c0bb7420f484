"""The ASR engine: one mlx-audio STT model, one thread that owns it, batched transcription.

`transcribe(audios, options)` is the unit of work: the Serve deployment hands it a batch of
requests that share options. Each audio is split at pauses (VAD) into windows of at most
30 s. For whisper, the windows of every request in the batch are decoded together: the
log-mel spectrograms are stacked and `model.decode` runs the encoder and the decoder over
all of them in one batched forward pass. Other mlx-audio STT models (qwen3_asr, parakeet,
sensevoice, ...) have no common batched API, so they fall back to their `generate` per window.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.accelerator import on_cpu_backend
from deployments.asr.config import whisper_dtype
from deployments.asr.token_logprobs import decode_with_logprobs, segment_logprobs, token_entries
from deployments.asr.transcript import Segment, TimestampVocabulary, Transcript, Word, segments_from_tokens
from deployments.audio.vad import Chunk, VADConfig, split_for_decoding
from deployments.engine_thread import EngineThread, Message
from deployments.protocol.errors import invalid_request

logger = logging.getLogger(__name__)

# Whisper's own thresholds for "this window is silence" (openai/whisper transcribe()).
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0


@dataclass(frozen=True)
class TranscribeOptions:
    """Per-request decoding options; requests batch together only when these are equal."""

    language: Optional[str] = None
    prompt: Optional[str] = None
    temperature: float = 0.0
    word_timestamps: bool = False
    task: str = "transcribe"  # or "translate" (into English; multilingual Whisper only)
    logprobs: bool = False  # each text token's log-probability (whisper; token_logprobs.py)


@dataclass
class EngineConfig:
    dtype: str = "auto"  # auto | float16 | float32 (whisper only)
    max_chunk_s: float = 30.0
    max_windows_per_pass: int = 32  # bounds the memory of one forward pass
    vad: str = "energy"  # energy | silero: what cuts a file into windows (docs/speech-models.md)
    cpu_kernels: bool = True  # whisper on MLX's CPU backend: numpy attention/GELU (deployments/kernels)


@dataclass(eq=False)
class TranscriptionJob(Message):
    """The engine thread's unit of work: audios that share options, decoded together."""

    audios: list[np.ndarray]
    options: TranscribeOptions


@dataclass(eq=False)
class HypothesisJob(Message):
    """A live utterance's provisional text (a streaming session's partial)."""

    audio: np.ndarray
    options: TranscribeOptions


@dataclass(eq=False)
class WindowStreamJob(Message):
    """One audio whose windows are decoded one at a time, each sent as soon as it is done."""

    audio: np.ndarray
    options: TranscribeOptions


def group_by_options(keys: list[Hashable]) -> list[list[int]]:
    """Indices of a batch grouped by key (model, options), in arrival order: requests with
    different languages or options never share a forward pass."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


class ASREngine(EngineThread[TranscriptionJob | WindowStreamJob | HypothesisJob]):
    """Owns one model. Create with `await ASREngine.start(model_id, model_dir, config)`."""

    kind = "asr"

    def __init__(self, model_id: str, model_dir: Path, config: EngineConfig):
        super().__init__(model_id, model_dir)
        self.config = config
        self.sample_rate = 16000
        self.model_type: Optional[str] = None
        self.multilingual = True
        self._model: Any = None
        # Written by the engine thread only: how batching actually went.
        self.stats = {
            "batches": 0,
            "requests": 0,
            "forward_passes": 0,
            "windows": 0,
            "largest_pass": 0,
            "hypotheses": 0,
        }

    @property
    def is_whisper(self) -> bool:
        return self.model_type == "whisper"

    # ------------------------------------------------------------------ asyncio side

    def check_options(self, options: TranscribeOptions) -> None:
        """Reject what this model cannot do, before the request joins a batch."""
        if options.language and not self.multilingual and options.language.lower() not in ("en", "english"):
            raise invalid_request(
                f"Model '{self.model_id}' transcribes English only; language '{options.language}' is not supported.",
                "language",
            )
        if options.logprobs and not self.is_whisper:
            raise invalid_request(
                f"Model '{self.model_id}' ({self.model_type}) gives no token log-probabilities; whisper models do",
                "include",
            )
        if options.task == "translate" and not (self.is_whisper and self.multilingual):
            raise invalid_request(
                f"Model '{self.model_id}' is English-only and cannot translate: translations need a "
                "multilingual Whisper model (e.g. mlx-community/whisper-tiny).",
                "model",
                "translation_unsupported",
            )

    async def transcribe(self, audios: list[np.ndarray], options: TranscribeOptions) -> list[Transcript]:
        """Transcribe mono float32 audios at `sample_rate`, together, on the engine thread."""
        return await self.submit(TranscriptionJob(audios, options))

    async def hypothesis(self, audio: np.ndarray, options: TranscribeOptions) -> str:
        """A live utterance's provisional text, fast: for whisper the encoder runs over the
        audio's real length (deployments/asr/hypothesis.py), not the padded 30 s window a final
        decodes. Cancelled before the engine thread takes it, it costs nothing."""
        return await self.submit(HypothesisJob(audio, options))

    def transcribe_windows(self, audio: np.ndarray, options: TranscribeOptions):
        """The segments of each VAD window of `audio` as it is decoded (the windows and text
        of `transcribe`, one window per forward pass)."""
        return self.stream(WindowStreamJob(audio, options), merge=lambda parts: [s for p in parts for s in p])

    # ------------------------------------------------------------------ engine thread

    def _handle(self, message: TranscriptionJob | WindowStreamJob | HypothesisJob) -> Any:
        if isinstance(message, WindowStreamJob):
            return self._stream_windows(message)
        if isinstance(message, HypothesisJob):
            return self._hypothesis(message)
        return self._transcribe(message.audios, message.options)

    def _hypothesis(self, job: HypothesisJob) -> str:
        if not self.is_whisper:
            return self._transcribe([job.audio], job.options)[0].text
        from deployments.asr import hypothesis

        options = job.options
        result = hypothesis.hypothesis(
            self._model, job.audio, language=self._language(options), prompt=options.prompt, task=options.task
        )
        self.stats["hypotheses"] += 1
        if result.no_speech_prob > NO_SPEECH_PROB and result.avg_logprob < NO_SPEECH_LOGPROB:
            return ""  # whisper's silent-window rule, as for finals
        return hypothesis.collapse_repeats(result.text.strip())

    def _stream_windows(self, job: WindowStreamJob) -> None:
        chunks = [self._split(job.audio)]
        for _, segments, _ in self._windows([job.audio], chunks, job.options, step=1):
            if job.cancelled:
                return
            self._send(job, segments)

    def _load(self) -> None:
        from mlx_audio.stt.utils import load_model

        t0 = time.perf_counter()
        self.model_type = json.loads((self.model_dir / "config.json").read_text()).get("model_type")
        if self.is_whisper:
            from deployments.kernels import whisper as whisper_kernels

            # Before the model is built: its token embedding is the kernels' class when installed.
            whisper_kernels.set_enabled(self.config.cpu_kernels)
            if self.config.cpu_kernels:
                whisper_kernels.install()
        self._model = load_model(self.model_dir)
        self.sample_rate = int(getattr(self._model, "sample_rate", 16000) or 16000)
        if self.is_whisper:
            from deployments.asr.whisper_tokenizer import memoize_tokenizers

            memoize_tokenizers(self._model)
            self.multilingual = bool(self._model.is_multilingual)
            self._set_whisper_dtype(self.config.dtype)
        logger.info(
            "Loaded ASR model %s (%s) from %s in %.1fs",
            self.model_id,
            self.model_type,
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _set_whisper_dtype(self, name: str) -> None:
        """mlx-audio builds whisper in float16; on a CPU float32 is faster (measured)."""
        import mlx.core as mx
        from mlx_audio.stt.models.whisper.whisper import sinusoids

        dtype = getattr(mx, whisper_dtype(name, on_cpu_backend()))
        model = self._model
        if model.dtype == dtype:
            return
        model.set_dtype(dtype)
        model.dtype = dtype
        # Constants outside the parameter tree, built in the old dtype.
        dims = model.dims
        model.encoder._positional_embedding = sinusoids(dims.n_audio_ctx, dims.n_audio_state).astype(dtype)
        model.decoder._mask = model.decoder._mask.astype(dtype)
        mx.eval(model.parameters(), model.encoder._positional_embedding, model.decoder._mask)

    def _transcribe(self, audios: list[np.ndarray], options: TranscribeOptions) -> list[Transcript]:
        chunks = [self._split(a) for a in audios]
        per_window: list[list[list[Segment]]] = [[] for _ in audios]
        languages = [self._language(options)] * len(audios)
        for i, segments, language in self._windows(audios, chunks, options, self.config.max_windows_per_pass):
            if languages[i] is None:  # detected: the first window speaks for the recording
                languages[i] = language
            per_window[i].append(segments)
        self.stats["batches"] += 1
        self.stats["requests"] += len(audios)
        return [
            Transcript.join([s for w in windows for s in w], language, len(audio) / self.sample_rate)
            for audio, windows, language in zip(audios, per_window, languages)
        ]

    def _split(self, audio: np.ndarray) -> list[Chunk]:
        """The windows (at most max_chunk_s, cut at pauses) that cover the speech in `audio`."""
        if self.config.vad == "silero":
            from deployments.audio_models.silero_vad import SileroConfig
            from deployments.audio_models.silero_vad import split_for_decoding as silero_split

            return silero_split(audio, self.sample_rate, SileroConfig(max_chunk_s=self.config.max_chunk_s))
        return split_for_decoding(audio, self.sample_rate, VADConfig(max_chunk_s=self.config.max_chunk_s))

    def _language(self, options: TranscribeOptions) -> Optional[str]:
        """The language to decode in: asked for, else English for English-only Whisper, else
        None (detected)."""
        if options.language or not self.is_whisper:
            return options.language
        return None if self.multilingual else "en"

    def _windows(self, audios, chunks, options: TranscribeOptions, step: int):
        """(audio index, segments, language) for every window, in order, `step` windows per pass."""
        if self.is_whisper:
            yield from self._whisper_windows(audios, chunks, options, step)
        else:
            for i, segments in self._generic_windows(audios, chunks, options):
                yield i, segments, options.language

    # ------------------------------------------------------------------ whisper: batched

    def _whisper_windows(self, audios, chunks, options: TranscribeOptions, step: int):
        import mlx.core as mx
        from mlx_audio.stt.models.whisper.decoding import DecodingOptions

        model = self._model
        decoding = DecodingOptions(
            task=options.task,
            language=self._language(options),
            temperature=options.temperature,
            prompt=options.prompt or None,
            without_timestamps=False,
            fp16=model.dtype == mx.float16,
        )
        windows = [(i, c) for i, cs in enumerate(chunks) for c in cs]
        for first in range(0, len(windows), step):
            group = windows[first : first + step]
            mels = mx.stack([self._mel(audios[i][c.start : c.end]) for i, c in group])
            # one batched forward pass over the group
            if options.logprobs:
                results, logprobs = decode_with_logprobs(model, mels, decoding)
            else:
                results, logprobs = model.decode(mels, decoding), [None] * len(group)
            self.stats["forward_passes"] += 1
            self.stats["windows"] += len(group)
            self.stats["largest_pass"] = max(self.stats["largest_pass"], len(group))
            for (i, chunk), result, mel, token_logprobs in zip(group, results, mels, logprobs):
                yield i, self._window_segments(chunk, result, mel, options, token_logprobs), result.language

    def _mel(self, samples: np.ndarray):
        import mlx.core as mx
        from mlx_audio.stt.models.whisper.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram, pad_or_trim

        mel = log_mel_spectrogram(mx.array(samples), n_mels=self._model.dims.n_mels, padding=N_SAMPLES)
        return pad_or_trim(mel, N_FRAMES, axis=-2).astype(self._model.dtype)

    def _window_segments(
        self, chunk: Chunk, result, mel, options: TranscribeOptions, token_logprobs: Optional[list[float]] = None
    ) -> list[Segment]:
        from mlx_audio.stt.models.whisper.audio import HOP_LENGTH

        if result.no_speech_prob > NO_SPEECH_PROB and result.avg_logprob < NO_SPEECH_LOGPROB:
            return []  # whisper's rule: a silent window, whatever it hallucinated
        tokenizer = self._model.get_tokenizer(language=result.language or "en", task="transcribe")
        vocab = TimestampVocabulary(timestamp_begin=tokenizer.timestamp_begin, eot=tokenizer.eot)
        start_s, end_s = chunk.seconds(self.sample_rate)
        window_s = end_s - start_s
        parts = segments_from_tokens(result.tokens, vocab, tokenizer.decode, window_s)
        seek = int(chunk.start // HOP_LENGTH)
        segments = [
            Segment(
                id=0,
                start=s,
                end=e,
                text=text,
                seek=seek,
                tokens=toks,
                temperature=result.temperature,
                avg_logprob=result.avg_logprob,
                compression_ratio=result.compression_ratio,
                no_speech_prob=result.no_speech_prob,
            )
            for s, e, toks, text in parts
        ]
        if token_logprobs is not None:
            texts = [toks for _, _, toks, _ in parts]
            is_text = lambda token: token != vocab.eot and not vocab.is_timestamp(token)  # noqa: E731
            for segment, values in zip(segments, segment_logprobs(result.tokens, token_logprobs, is_text, texts)):
                segment.logprobs = token_entries(tokenizer, segment.tokens, values)
        if options.word_timestamps and segments:
            self._add_words(segments, mel, tokenizer, window_s)
        return [s.shifted(start_s) for s in segments]

    def _add_words(self, segments: list[Segment], mel, tokenizer, window_s: float) -> None:
        """Word times from cross-attention alignment (mlx-audio's whisper timing code)."""
        from mlx_audio.stt.models.whisper.audio import FRAMES_PER_SECOND
        from mlx_audio.stt.models.whisper.timing import add_word_timestamps

        dicts = [{"seek": 0, "start": s.start, "end": s.end, "tokens": s.tokens} for s in segments]
        add_word_timestamps(
            segments=dicts,
            model=self._model,
            tokenizer=tokenizer,
            mel=mel,
            num_frames=min(mel.shape[0], round(window_s * FRAMES_PER_SECOND)),
            last_speech_timestamp=0.0,
        )
        for segment, d in zip(segments, dicts):
            segment.start, segment.end = d["start"], d["end"]
            segment.words = [Word(w["word"], w["start"], w["end"], w.get("probability")) for w in d.get("words", [])]

    # ------------------------------------------------------------------ other models: per window

    def _generic_windows(self, audios, chunks, options: TranscribeOptions):
        """(audio index, segments) per window: these models decode one window per call."""
        kwargs = self._generate_kwargs(options)
        for i, (audio, cs) in enumerate(zip(audios, chunks)):
            for chunk in cs:
                result = self._model.generate(audio[chunk.start : chunk.end], **kwargs)
                self.stats["forward_passes"] += 1
                self.stats["windows"] += 1
                self.stats["largest_pass"] = max(self.stats["largest_pass"], 1)
                text = (getattr(result, "text", None) or "").strip()
                start_s, end_s = chunk.seconds(self.sample_rate)
                yield i, [Segment(id=0, start=round(start_s, 3), end=round(end_s, 3), text=text)] if text else []

    def _generate_kwargs(self, options: TranscribeOptions) -> dict[str, Any]:
        """Pass only the options this model's `generate` accepts."""
        wanted = {"language": options.language, "temperature": options.temperature, "verbose": False}
        params = inspect.signature(self._model.generate).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        return {k: v for k, v in wanted.items() if v is not None and (k in params or takes_any)}
