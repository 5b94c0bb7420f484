"""The TTS slot as a Ray Serve deployment: a thin adapter from Serve to `TTSEngine`.

`synthesize` streams `SpeechChunk`s: first an empty one carrying the sample rate (sent once
the request has been checked: voice, reference audio, options), then audio as the engine
generates it. Voices come from the registry file (re-read when it changes, so a voice
registered through any replica works on all of them) and the model's presets.
Models are chosen per request through Serve model multiplexing, as in the LLM slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
from ray import serve

from deployments.audio.encode import encode_wav
from deployments.audio.reference import BadReferenceAudio, read_reference
from deployments.protocol.errors import APIError, invalid_request, server_error
from deployments.protocol.speech import SpeechChunk, SynthesisParams
from deployments.slot_replica import SlotReplica
from deployments.tts.config import TTSSlotConfig
from deployments.tts.engine import SpeechJob, StyleFitJob, TTSEngine
from deployments.tts.metrics import SpeechMetrics
from deployments.tts.sentences import split_sentences
from deployments.tts.voices import (
    RegistryError,
    VoiceEntry,
    VoiceNotFound,
    VoiceRegistry,
    atomic_write,
    check_voice_name,
    list_voices,
    resolve_voice,
    startup_voice_name,
    with_startup_voice,
)

logger = logging.getLogger("ray.serve")


def registry_path(config: TTSSlotConfig, cache_dir: Path) -> Path:
    if config.voices_config:
        return Path(config.voices_config).expanduser()
    return cache_dir / "tts" / "voices.json"


@serve.deployment
class TTSSlot(SlotReplica):
    slot_name = "tts"
    file_patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.yaml", "voices/*", "embeddings/*", "*.npz"]
    metrics_class = SpeechMetrics

    async def setup(self) -> None:
        self.registry = VoiceRegistry(registry_path(self.config, self.cache_dir))
        self.voices_dir = Path(self.config.voices_dir).expanduser() if self.config.voices_dir else None
        self.startup_voice = await self._startup_voice()

    async def _startup_voice(self) -> Optional[Path]:
        """TTS_REF_AUDIO: checked once here (a replica that cannot use it does not start)."""
        if not self.config.ref_audio:
            return None
        path = Path(self.config.ref_audio).expanduser().resolve()
        try:
            data = await asyncio.to_thread(path.read_bytes)
            await asyncio.to_thread(read_reference, data, 24000)
        except (OSError, BadReferenceAudio) as e:
            raise RuntimeError(f"TTS_REF_AUDIO / tts.ref_audio {path}: cannot use it as a voice: {e}") from None
        logger.info("Default voice %s from TTS_REF_AUDIO %s", startup_voice_name(path), path)
        return path

    async def start_engine(self, model_id: str, model_dir: Path) -> TTSEngine:
        return await TTSEngine.start(model_id, model_dir, self.config.streaming_interval_s)

    def engine_summary(self, engine: TTSEngine) -> dict[str, Any]:
        return {**vars(engine.stats), "pending": engine.pending()}

    # ------------------------------------------------------------------ synthesis

    async def synthesize(self, params: SynthesisParams) -> AsyncIterator[SpeechChunk]:
        started = time.perf_counter()
        engine, job = await self._job(await self.engine(), params)
        meter = self.metrics.meter(engine.model_id, len(params.text), engine.sample_rate, started)
        yield SpeechChunk(sample_rate=engine.sample_rate)
        try:
            async for samples in engine.synthesize(job):
                meter.audio(len(samples))
                yield SpeechChunk(sample_rate=engine.sample_rate, samples=samples.astype("<f4").tobytes())
        finally:
            meter.done()

    async def _job(self, engine: TTSEngine, params: SynthesisParams) -> tuple[TTSEngine, SpeechJob]:
        """The request checked and made a job, with the engine that speaks it."""
        if len(params.text) > self.config.max_input_chars:
            raise invalid_request(
                f"input is {len(params.text)} characters; the maximum is {self.config.max_input_chars}",
                "input",
                "input_too_long",
            )
        job = SpeechJob(
            segments=split_sentences(params.text),
            speed=params.speed,
            language=params.language,
            instruct=params.instruct,
        )
        if params.reference_audio is not None:
            job.ref_audio = await self._reference(params.reference_audio, engine.sample_rate, "reference_audio")
            job.ref_text = params.reference_text
        else:
            voice = self._resolve(engine, params.voice)
            if voice.preset is not None:
                job.preset = voice.preset
            elif voice.conditioning is not None and voice.conditioning_model == engine.model_id:
                job.conditioning = voice.conditioning  # trained for this model (Kokoro's fitted style)
            else:
                engine = await self._cloning_engine(engine)
                if voice.conditioning is not None and voice.conditioning_model == engine.model_id:
                    job.conditioning = voice.conditioning  # trained for this model: no encoding
                else:
                    job.ref_audio = await self._voice_audio(voice.name, voice.ref_audio, engine.sample_rate)
                    job.ref_text = voice.ref_text
        engine.check_job(job)
        return engine, job

    async def _cloning_engine(self, engine: TTSEngine) -> TTSEngine:
        """The engine for a registry or voices_dir voice made from reference audio: when the
        request names no model and the default cannot clone (Kokoro), the slot's `clone_model`;
        a request that named its model keeps it (and its 400)."""
        from ray import serve

        if engine.capabilities.clone or not self.config.clone_model or serve.get_multiplexed_model_id():
            return engine
        return await self.models.get(self.config.clone_model)

    def _resolve(self, engine: TTSEngine, requested: Optional[str]):
        try:
            return resolve_voice(
                requested,
                self._registry_data(),
                engine.presets,
                self.voices_dir,
                engine.default_preset,
                engine.preset_aliases,
            )
        except VoiceNotFound as e:
            raise APIError(404, str(e), "invalid_request_error", "voice", "voice_not_found") from None

    def _registry_data(self, with_startup: bool = True):
        try:
            data = self.registry.data()
        except RegistryError as e:
            raise server_error(f"The voice registry {self.registry.path} is malformed: {e}") from None
        if with_startup and self.startup_voice is not None:
            return with_startup_voice(data, self.startup_voice, self.config.ref_text)
        return data

    @staticmethod
    async def _reference(data: bytes, sample_rate: int, param: str):
        try:
            return await asyncio.to_thread(read_reference, data, sample_rate)
        except BadReferenceAudio as e:
            raise invalid_request(str(e), param, "invalid_reference_audio") from None

    async def _voice_audio(self, name: str, path: Path, sample_rate: int):
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except OSError:
            raise server_error(f"Voice '{name}' reference audio not found: {path}") from None
        try:
            return await asyncio.to_thread(read_reference, data, sample_rate)
        except BadReferenceAudio as e:
            raise server_error(f"Voice '{name}' reference audio {path} is unusable: {e}") from None

    # ------------------------------------------------------------------ voices and facts

    async def describe(self) -> dict[str, Any]:
        """Facts clients need before synthesizing (the WebSocket's task_started)."""
        engine = await self.engine()
        return {
            "model": engine.model_id,
            "model_type": engine.model_type,
            "sample_rate": engine.sample_rate,
            "presets": engine.presets,
            "max_input_chars": self.config.max_input_chars,
            "ws_idle_timeout_s": self.config.ws_idle_timeout_s,
        }

    async def voices(self) -> dict[str, Any]:
        engine = await self.engine()
        return list_voices(self._registry_data(), engine.presets, engine.default_preset, engine.preset_aliases)

    async def register_voice(
        self,
        name: str,
        audio: bytes,
        ref_text: str = "",
        aliases: Optional[list[str]] = None,
        language: Optional[str] = None,
    ) -> dict[str, Any]:
        """Store the reference audio next to the registry and add the voice to it atomically."""
        try:
            check_voice_name(name)
            for alias in aliases or []:
                check_voice_name(alias)
        except RegistryError as e:
            raise invalid_request(str(e), "name") from None
        engine = await self.engine()
        if name.lower() in (p.lower() for p in engine.presets):
            raise invalid_request(f"'{name}' is a preset voice of the model", "name", "voice_exists")
        samples = await self._reference(audio, engine.sample_rate, "reference_audio")
        path = self.registry.path.parent / "voices" / f"{name}.wav"
        await asyncio.to_thread(atomic_write, path, encode_wav(samples, engine.sample_rate))
        entry = VoiceEntry(ref_audio=str(path), ref_text=ref_text, aliases=list(aliases or []), language=language)
        self._registry_data(with_startup=False)  # refuse to overwrite a malformed file
        await asyncio.to_thread(self.registry.register, name, entry)
        return {"name": name, "aliases": entry.aliases, "source": "registry"}

    async def cache_conditioning(self, name: str, samples: bytes) -> dict[str, Any]:
        """Voice training: the model's conditioning for a reference (float32 mono at the model's
        rate), computed once and cached next to the registry with the reference itself."""
        from safetensors.numpy import save

        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        conditioning = await engine.voice_conditioning(audio)
        voices = self.registry.path.parent / "voices"
        wav, cached = voices / f"{name}.wav", voices / f"{name}.{engine.model_type}.safetensors"
        await asyncio.to_thread(atomic_write, wav, encode_wav(audio, engine.sample_rate))
        await asyncio.to_thread(atomic_write, cached, save({"audio_prompt": conditioning}))
        return {"ref_audio": str(wav), "conditioning": str(cached), "conditioning_model": engine.model_id}

    async def fit_voice(
        self, name: str, samples: bytes, steps: int, language: Optional[str] = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Voice training on Kokoro (a streamed call): the engine's fitting events (stock voices
        scored, then one loss per step), then the fitted pack stored next to the registry as
        `<name>.kokoro.safetensors` (a voice file Kokoro loads by path) with the reference, and
        a last event carrying the files for `register_trained_voice`. Runs on this replica's
        engine thread: syntheses on other replicas go on; closing the stream stops the fit."""
        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        voices = self.registry.path.parent / "voices"
        stock = voices / f".{engine.model_id.replace('/', '--')}.stock-ge2e.npz"
        job = StyleFitJob(audio=audio, steps=steps, language=language, stock_cache=stock)
        result = None
        async for event in engine.fit_style(job):
            if "pack" in event:
                result = event
            else:
                yield event
        if result is None:  # the engine stopped early: the caller left
            return
        wav, cached = voices / f"{name}.wav", voices / f"{name}.{engine.model_type}.safetensors"
        await asyncio.to_thread(atomic_write, wav, encode_wav(audio, engine.sample_rate))
        await asyncio.to_thread(atomic_write, cached, _voice_pack_file(result.pop("pack")))
        files = {"ref_audio": str(wav), "conditioning": str(cached), "conditioning_model": engine.model_id}
        yield {**result, "files": files}

    async def register_trained_voice(
        self, name: str, files: dict[str, str], ref_text: str = "", language: Optional[str] = None
    ) -> dict[str, Any]:
        """Voice training's last stage: the voice in the registry, atomically (every replica
        re-reads the file), with the conditioning `cache_conditioning` stored."""
        entry = VoiceEntry(ref_text=ref_text, language=language, **files)
        self._registry_data(with_startup=False)  # refuse to overwrite a malformed file
        await asyncio.to_thread(self.registry.register, name, entry)
        return {"name": name, "source": "registry", "model": files["conditioning_model"]}

    async def delete_voice(self, name: str) -> dict[str, Any]:
        self._registry_data(with_startup=False)
        entry = await asyncio.to_thread(self.registry.remove, name)
        if entry is None:
            raise APIError(
                404, f"Voice '{name}' is not in the registry", "invalid_request_error", "name", "voice_not_found"
            )
        managed = self.registry.path.parent / "voices"
        audio = Path(entry.ref_audio)
        if audio.parent == managed:  # only files this server stored; never a user's own file
            audio.unlink(missing_ok=True)
        if entry.conditioning and Path(entry.conditioning).parent == managed:
            Path(entry.conditioning).unlink(missing_ok=True)
        return {"name": name, "deleted": True}

    def stats(self) -> dict:
        return {e.model_id: self.engine_summary(e) for e in self.models.engines()}


def _voice_pack_file(pack: np.ndarray) -> bytes:
    """A Kokoro voice pack as the .safetensors mlx-audio's Kokoro loads (key "voice")."""
    from safetensors.numpy import save

    return save({"voice": np.ascontiguousarray(pack, dtype=np.float32)})
