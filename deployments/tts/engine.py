"""The TTS engine: one mlx-audio TTS model and the one thread that owns it.

Requests arrive from the replica's asyncio loop as `SpeechJob`s; the engine thread runs them
one at a time (a model's decoder keeps streaming state, e.g. pocket_tts's Mimi, so two
syntheses cannot interleave on one model: concurrency comes from more replicas). Each job's
text is already split into segments; every segment is generated with `stream=True` where the
model supports it, and each audio chunk goes back to the request as soon as the model yields
it (through EngineThread.stream: chunks that pile up while the consumer is busy come as one).
A job carries its own voice and reference audio: nothing about a voice is cached on the
engine, so concurrent cloning requests can never mix speakers.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.engine_thread import EngineThread, Message
from deployments.protocol.errors import invalid_request, server_error
from deployments.tts import model_hooks

logger = logging.getLogger(__name__)

# Named in the 400 for reference audio on a model without a speaker encoder (e.g. Kokoro).
CLONING_MODELS = (
    "models that clone: the built-in 'ominix-tiny-pocket-tts' (random weights, for testing), "
    "or a real pocket_tts or Qwen3-TTS Base model"
)


@dataclass(eq=False)
class SpeechJob(Message):
    """One synthesis: segments of text, a voice, options. Built by the deployment."""

    segments: list[str]
    preset: Optional[str] = None  # a model preset voice
    ref_audio: Optional[np.ndarray] = None  # cloning: float32 mono at the model's rate
    ref_text: Optional[str] = None
    speed: float = 1.0
    language: Optional[str] = None
    instruct: Optional[str] = None
    conditioning: Optional[Path] = None  # a voice's cached conditioning (.safetensors, model_hooks.cached_voice)
    word_timings: bool = False  # send each chunk's words with their times (Kokoro, English)


@dataclass
class Spoken:
    """A chunk of a synthesis: its audio and, with `word_timings`, the words timed in it as
    (word, start s, end s) from the synthesis's start."""

    samples: np.ndarray  # float32 mono at the model's rate
    words: list[tuple[str, float, float]]

    @staticmethod
    def merge(chunks: list[Spoken]) -> Spoken:
        return Spoken(np.concatenate([c.samples for c in chunks]), [w for c in chunks for w in c.words])


@dataclass(eq=False)
class ConditioningJob(Message):
    """A voice's conditioning from its reference, computed once (voice training)."""

    audio: np.ndarray  # float32 mono at the model's rate


@dataclass
class StyleFitJob:
    """Voice training on Kokoro: a style fitted to a reference (deployments/tts/kokoro_fit.py)
    in a child process (deployments/tts/fit_process.py), streamed as events: {"scored", "of"}
    per stock voice scored, {"step", "loss"} per step, then {"pack", ...} with the fitted pack."""

    audio: np.ndarray  # float32 mono at the model's rate
    steps: int
    language: Optional[str] = None
    stock_cache: Optional[Path] = None  # where the stock voices' embeddings are kept across restarts
    base_voices: Optional[list[str]] = None  # the stock voices the style may blend (None: all)


@dataclass
class Capabilities:
    """What a model's `generate` accepts, read from its signature."""

    stream: bool = False
    speed: bool = False
    language: bool = False
    instruct: bool = False
    clone: bool = False
    ref_text: bool = False

    @classmethod
    def of(cls, model: Any) -> Capabilities:
        params = inspect.signature(model.generate).parameters
        return cls(
            stream="stream" in params,
            speed="speed" in params,
            language="lang_code" in params,
            instruct="instruct" in params,
            clone="ref_audio" in params,
            ref_text="ref_text" in params,
        )


@dataclass
class EngineStats:
    jobs: int = 0
    chunks: int = 0
    samples: int = 0
    failed: int = 0
    active: int = 0  # the synthesis on the engine thread now (0 or 1); with `pending`: in flight


class TTSEngine(EngineThread[SpeechJob]):
    """Owns one model. Create with `await TTSEngine.start(model_id, model_dir, streaming_interval_s)`."""

    kind = "tts"

    def __init__(self, model_id: str, model_dir: Path, streaming_interval_s: float = 0.24):
        super().__init__(model_id, model_dir)
        self.streaming_interval_s = streaming_interval_s
        self.sample_rate: int = 24000
        self.model_type: str = ""
        self.presets: list[str] = []
        self.default_preset: Optional[str] = None  # None: the first preset
        self.preset_aliases: dict[str, str] = {}  # other names of presets (OpenAI's, for Kokoro)
        self.capabilities = Capabilities()
        self.training_unsupported: Optional[str] = None  # why voice training cannot run on this model
        self.stats = EngineStats()

    # ------------------------------------------------------------------ asyncio side

    def check_job(self, job: SpeechJob) -> None:
        """400 for options this model cannot honour (never silently ignored)."""
        caps = self.capabilities
        if job.speed != 1.0 and not caps.speed:
            raise invalid_request(f"Model '{self.model_id}' ({self.model_type}) does not support 'speed'", "speed")
        if job.instruct and not caps.instruct:
            raise invalid_request(
                f"Model '{self.model_id}' ({self.model_type}) does not support 'instruct'", "instruct"
            )
        if job.ref_audio is not None and not caps.clone:
            raise invalid_request(
                f"Model '{self.model_id}' ({self.model_type}) cannot clone a voice from reference audio; "
                f"{CLONING_MODELS}",
                "reference_audio",
            )
        if self.model_type == "kokoro":
            model_hooks.check_kokoro_language(self.model_id, job.language)
        if job.word_timings:
            model_hooks.check_word_timings(self.model_id, self.model_type, job.language, job.preset)

    def voice_conditioning(self, audio: np.ndarray) -> asyncio.Future:
        """The model's conditioning for a reference (float32 array), as its reference encoder
        computes it before every cloned synthesis: a voice trained once skips that step. The
        result is the tensors of the voice's .safetensors file, {name: array}."""
        return self.submit(ConditioningJob(audio=audio))

    def fit_style(self, job: StyleFitJob) -> AsyncIterator[dict]:
        """Kokoro voice training's events (see StyleFitJob), from a child process: leaving the
        iterator kills it at once, and this engine's syntheses go on while it fits."""
        from deployments.tts.fit_process import fit_in_child

        if self.model_type != "kokoro":
            raise invalid_request(
                f"Model '{self.model_id}' ({self.model_type}) has no style to fit", "model", "training_unsupported"
            )
        return fit_in_child(self.model_dir, job.audio, job.steps, job.language, job.stock_cache, job.base_voices)

    async def synthesize(self, job: SpeechJob) -> AsyncIterator[np.ndarray]:
        """Audio chunks (float32 mono at `sample_rate`) as the model generates them.
        Closing the iterator early stops the synthesis after the current chunk."""
        async with contextlib.aclosing(self.synthesize_spoken(job)) as chunks:  # leaving stops the job now
            async for chunk in chunks:
                yield chunk.samples

    def synthesize_spoken(self, job: SpeechJob) -> AsyncIterator[Spoken]:
        """`synthesize`'s chunks with their timed words (none unless `job.word_timings`)."""
        return self.stream(job, merge=Spoken.merge)

    # ------------------------------------------------------------------ engine thread

    def _load(self) -> None:
        from mlx_audio.tts.utils import load_model

        t0 = time.perf_counter()
        model_hooks.before_load(self.model_dir)
        self._model = load_model(self.model_dir)
        self.sample_rate = int(self._model.sample_rate)
        self.model_type = getattr(self._model, "model_type", "") or model_hooks.model_type(self.model_dir)
        model_hooks.after_load(self._model, self.model_type)
        self.capabilities = Capabilities.of(self._model)
        self.training_unsupported = model_hooks.training_unsupported(self._model, self.model_type)
        self.presets = find_presets(self.model_dir)
        self.default_preset = model_hooks.default_preset(self.model_type, self.presets)
        self.preset_aliases = model_hooks.preset_aliases(self.model_type, self.presets)
        logger.info(
            "Loaded TTS %s (%s, %d Hz, presets %s) from %s in %.1fs",
            self.model_id,
            self.model_type,
            self.sample_rate,
            self.presets,
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _handle(self, job: SpeechJob | ConditioningJob) -> Optional[np.ndarray]:
        if isinstance(job, ConditioningJob):
            return self._conditioning(job.audio)
        self.stats.jobs += 1
        self.stats.active += 1
        try:
            with self._voice(job) as voice:
                self._speak(job, {**self._generate_kwargs(job), **voice})
        except Exception as e:  # never let one bad request kill the replica
            logger.exception("Synthesis failed")
            self.stats.failed += 1
            raise server_error(f"Speech synthesis failed: {type(e).__name__}: {e}") from None
        finally:
            self.stats.active -= 1

    def _voice(self, job: SpeechJob):
        """The generate options that speak the job's cached conditioning, if it has one."""
        if job.conditioning is None:
            return contextlib.nullcontext({})
        return model_hooks.cached_voice(self._model, self.model_type, job.conditioning, job.ref_text)

    def _speak(self, job: SpeechJob, kwargs: dict[str, Any]) -> None:
        sent = 0  # samples, the time the chunk's words are counted from
        for segment in job.segments:
            for audio, words in self._generate(job, segment, kwargs):
                if job.cancelled:
                    return
                samples = np.asarray(audio, dtype=np.float32).reshape(-1)
                if samples.size:
                    self.stats.chunks += 1
                    self.stats.samples += samples.size
                    offset = sent / self.sample_rate
                    self._send(job, Spoken(samples, [(w, offset + start, offset + end) for w, start, end in words]))
                    sent += samples.size

    def _generate(self, job: SpeechJob, segment: str, kwargs: dict[str, Any]) -> Iterator[tuple[Any, list]]:
        """The model's audio chunks for one segment, each with its timed words (from its start)."""
        if job.word_timings:
            return model_hooks.kokoro_spoken_words(self._model, segment, kwargs)
        return ((chunk.audio, []) for chunk in self._model.generate(segment, **kwargs))

    def _conditioning(self, audio: np.ndarray) -> dict[str, np.ndarray]:
        import mlx.core as mx

        if self.model_type == "qwen3_tts":
            if self.training_unsupported:
                raise invalid_request(
                    f"Model '{self.model_id}': {self.training_unsupported}", "model", "training_unsupported"
                )
            return model_hooks.qwen3_tts_conditioning(self._model, audio)
        # pocket_tts's reference encoder (mlx-audio's `_encode_audio`: Mimi latents projected
        # to the flow model's width), on the reference as its `generate` would cut it.
        encode = getattr(self._model, "_encode_audio", None) if self.model_type == "pocket_tts" else None
        if encode is None:
            raise invalid_request(
                f"Model '{self.model_id}' ({self.model_type}) has no reference encoder to train a voice for; "
                "voice training runs on pocket_tts and Qwen3-TTS Base models",
                "model",
                "training_unsupported",
            )
        limit = getattr(self._model.config, "audio_prompt_max_duration", None)
        if limit:
            audio = audio[: int(limit * self.sample_rate)]
        prompt = encode(mx.array(audio, dtype=mx.float32)[None, None, :])
        mx.eval(prompt)
        return {"audio_prompt": np.array(prompt, dtype=np.float32)}

    def _generate_kwargs(self, job: SpeechJob) -> dict[str, Any]:
        import mlx.core as mx

        caps = self.capabilities
        kwargs: dict[str, Any] = {"verbose": False}
        if caps.stream:
            kwargs.update(stream=True, streaming_interval=self.streaming_interval_s)
        if job.conditioning is not None:
            pass  # the voice options come from model_hooks.cached_voice
        elif job.ref_audio is not None:
            kwargs["ref_audio"] = mx.array(job.ref_audio)
            if job.ref_text and caps.ref_text:
                kwargs["ref_text"] = job.ref_text
        elif job.preset is not None:
            kwargs["voice"] = job.preset
        if caps.speed:
            kwargs["speed"] = job.speed
        if caps.language and job.language:
            kwargs["lang_code"] = job.language
        if self.model_type == "kokoro":
            kwargs["lang_code"] = model_hooks.kokoro_lang_code(job.language, job.preset)
        if caps.instruct and job.instruct:
            kwargs["instruct"] = job.instruct
        return kwargs


def find_presets(model_dir: Path) -> list[str]:
    """Preset voice names a model directory ships: voices/ and embeddings/ files, pocket_tts's
    default-voice, Qwen3-TTS CustomVoice speakers (config.json)."""
    names: list[str] = []
    for folder in ("voices", "embeddings"):
        for path in sorted((model_dir / folder).glob("*")):
            if path.suffix in (".safetensors", ".pt", ".npy", ".bin"):
                names.append(path.stem)
    if (model_dir / "default-voice.safetensors").is_file():
        names.append("default")
    names += _config_speakers(model_dir)
    return list(dict.fromkeys(names))


def _config_speakers(model_dir: Path) -> list[str]:
    import json

    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return []
    speakers = (config.get("talker_config") or {}).get("spk_id") or {}
    return sorted(speakers) if isinstance(speakers, dict) else []
