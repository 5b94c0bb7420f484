"""The TTS slot as a Ray Serve deployment: a thin adapter from Serve to `TTSEngine`.

`synthesize` streams `SpeechChunk`s: first an empty one carrying the sample rate (sent once
the request has been checked: voice, reference audio, options), then audio as the engine
generates it. The replica's voices are its `VoiceLibrary` (deployments/voices/library.py: the
registry file, kept in line with the cluster's voices in Control); the voice handle methods
here hand it the engine that speaks. Models are chosen per request through Serve model
multiplexing, as in the LLM slot.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Optional

import numpy as np
from ray import serve

from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import SpeechChunk, SpokenWord, SynthesisParams
from deployments.routing.router import ONE_JOB_AT_A_TIME
from deployments.slot_replica import SlotReplica
from deployments.tts.engine import SpeechJob, StyleFitJob, TTSEngine
from deployments.tts.metrics import SpeechMetrics
from deployments.tts.sentences import split_sentences
from deployments.tts.slot import SLOT
from deployments.voices.library import VoiceLibrary, check_startup_voice, reference_samples, registry_path


@serve.deployment(request_router_config=ONE_JOB_AT_A_TIME)
class TTSSlot(SlotReplica):
    slot = SLOT
    file_patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.yaml", "voices/*", "embeddings/*", "*.npz"]
    metrics_class = SpeechMetrics

    async def setup(self) -> None:
        self.library = VoiceLibrary(
            registry_path(self.config.voices_config, self.cache_dir),
            voices_dir=Path(self.config.voices_dir).expanduser() if self.config.voices_dir else None,
            startup_voice=await check_startup_voice(self.config.ref_audio),
            startup_text=self.config.ref_text,
            cluster=self.agent.control,
        )
        await self.library.start()

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
            async for chunk in engine.synthesize_spoken(job):
                meter.audio(len(chunk.samples))
                words = [SpokenWord(word=w, start=round(a, 3), end=round(b, 3)) for w, a, b in chunk.words]
                yield SpeechChunk(
                    sample_rate=engine.sample_rate, samples=chunk.samples.astype("<f4").tobytes(), words=words
                )
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
            word_timings=params.word_timings,
        )
        if params.reference_audio is not None:
            job.ref_audio = await reference_samples(params.reference_audio, engine.sample_rate, "reference_audio")
            job.ref_text = params.reference_text
        else:
            voice = await self.library.resolve(params.voice, engine)
            if voice.preset is not None:
                job.preset = voice.preset
            elif voice.conditioning is not None and voice.conditioning_model == engine.model_id:
                job.conditioning = voice.conditioning  # trained for this model (Kokoro's fitted style)
                job.ref_text = voice.ref_text  # Qwen3-TTS Base: its in-context mode, as with the clip
            else:
                engine = await self._cloning_engine(engine)
                job.ref_text = voice.ref_text
                if voice.conditioning is not None and voice.conditioning_model == engine.model_id:
                    job.conditioning = voice.conditioning  # trained for this model: no encoding
                else:
                    job.ref_audio = await self.library.recording(voice, engine.sample_rate)
        engine.check_job(job)
        return engine, job

    async def _cloning_engine(self, engine: TTSEngine) -> TTSEngine:
        """The engine for a registry or voices_dir voice made from reference audio: when the
        request names no model and the default cannot clone (Kokoro), the slot's `clone_model`;
        a request that named its model keeps it (and its 400)."""
        from ray import serve

        if engine.capabilities.clone or not self.config.clone_model or serve.get_multiplexed_model_id():
            return engine
        return await self.models.use(self.config.clone_model)

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
            "training_unsupported": engine.training_unsupported,  # why voice training cannot run, or None
        }

    async def voices(self) -> dict[str, Any]:
        return self.library.listing(await self.engine())

    async def register_voice(
        self,
        name: str,
        audio: bytes,
        ref_text: str = "",
        aliases: Optional[list[str]] = None,
        language: Optional[str] = None,
    ) -> dict[str, Any]:
        """Store the reference audio with the voice and add the voice to the registry atomically."""
        return await self.library.register_recording(self.engine, name, audio, ref_text, aliases, language)

    async def cache_conditioning(self, name: str, samples: bytes) -> dict[str, Any]:
        """Voice training: the model's conditioning for a reference (float32 mono at the model's
        rate), computed once and stored with the reference itself (`VoiceLibrary.store_trained`):
        pocket_tts's audio prompt, Qwen3-TTS Base's x-vector and reference codes (model_hooks)."""
        from safetensors.numpy import save

        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        conditioning = await engine.voice_conditioning(audio)
        return await self.library.store_trained(name, audio, engine, save(conditioning))

    async def fit_voice(
        self,
        name: str,
        samples: bytes,
        steps: int,
        language: Optional[str] = None,
        base_voices: Optional[list[str]] = None,
    ) -> AsyncIterator[dict[str, Any]]:
        """Voice training on Kokoro (a streamed call): the engine's fitting events (stock voices
        scored, then one loss per step), then the fitted pack stored with the reference as
        `<name>.kokoro.safetensors` (a voice file Kokoro loads by path, as `cache_conditioning`
        stores), and a last event carrying the files for `register_trained_voice`. Runs in a
        child process of this replica (deployments/tts/fit_process.py): syntheses go on, here
        too; closing the stream kills it at once."""
        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        stock = self.library.dir / f".{engine.model_id.replace('/', '--')}.stock-ge2e.npz"
        job = StyleFitJob(audio=audio, steps=steps, language=language, stock_cache=stock, base_voices=base_voices)
        result = None
        async for event in engine.fit_style(job):
            if "pack" in event:
                result = event
            else:
                yield event
        if result is None:  # the engine stopped early: the caller left
            return
        files = await self.library.store_trained(name, audio, engine, _voice_pack_file(result.pop("pack")))
        yield {**result, "files": files}

    async def register_trained_voice(
        self, name: str, files: dict[str, str], ref_text: str = "", language: Optional[str] = None
    ) -> dict[str, Any]:
        """Voice training's last stage: the voice in the registry, atomically, with the files
        `cache_conditioning` or `fit_voice` stored."""
        return await self.library.register_trained(name, files, ref_text, language)

    async def delete_voice(self, name: str) -> dict[str, Any]:
        return await self.library.delete(name)

    def stats(self) -> dict:
        return {e.model_id: self.engine_summary(e) for e in self.models.engines()}


def _voice_pack_file(pack: np.ndarray) -> bytes:
    """A Kokoro voice pack as the .safetensors mlx-audio's Kokoro loads (key "voice")."""
    from safetensors.numpy import save

    return save({"voice": np.ascontiguousarray(pack, dtype=np.float32)})
