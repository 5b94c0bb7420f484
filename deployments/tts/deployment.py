"""The TTS slot as a Ray Serve deployment: a thin adapter from Serve to `TTSEngine`.

`synthesize` streams `SpeechChunk`s: first an empty one carrying the sample rate (sent once
the request has been checked: voice, reference audio, options), then audio as the engine
generates it. Voices come from the registry file (re-read when it changes) and the model's
presets. With the control plane, registrations go to the cluster's voice registry in Control
(tts/voice_store.py) and every replica mirrors it into its own registry file, so a voice
registered through a replica on one node is spoken by replicas on nodes with no shared disk;
without it (a graph with no Control), the file on disk is the only registry, as before.
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
from deployments.routing.router import ONE_JOB_AT_A_TIME
from deployments.slot_replica import SlotReplica
from deployments.tts.config import TTSSlotConfig
from deployments.tts.engine import SpeechJob, StyleFitJob, TTSEngine
from deployments.tts.metrics import SpeechMetrics
from deployments.tts.sentences import split_sentences
from deployments.tts.slot import SLOT
from deployments.tts.voice_store import VoiceMirror, pull
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

VOICE_POLL_S = 10.0  # the long poll on the cluster's voice registry


def registry_path(config: TTSSlotConfig, cache_dir: Path) -> Path:
    if config.voices_config:
        return Path(config.voices_config).expanduser()
    return cache_dir / "tts" / "voices.json"


@serve.deployment(request_router_config=ONE_JOB_AT_A_TIME)
class TTSSlot(SlotReplica):
    slot = SLOT
    file_patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.yaml", "voices/*", "embeddings/*", "*.npz"]
    metrics_class = SpeechMetrics

    async def setup(self) -> None:
        self.registry = VoiceRegistry(registry_path(self.config, self.cache_dir))
        self.voices_dir = Path(self.config.voices_dir).expanduser() if self.config.voices_dir else None
        self.startup_voice = await self._startup_voice()
        self.mirror = VoiceMirror(self.registry)
        self.cluster = self.agent.control  # Control holds the cluster's voices; None: the file alone
        self._sync_lock = asyncio.Lock()
        self._voice_follower: Optional[asyncio.Task] = None
        if self.cluster is not None:
            try:  # before serving: a new replica (on a new node too) knows every registered voice
                await asyncio.wait_for(self.sync_voices(), 60)
            except Exception as e:
                logger.warning("Voice registry sync failed (%s); serving the local registry file until it works", e)
            self._voice_follower = asyncio.create_task(self._follow_voices())

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

    # ------------------------------------------------------------------ the cluster's voices

    async def sync_voices(self, snapshot: Optional[dict] = None) -> bool:
        """Bring this node's registry file to the cluster's voices (the latest, or `snapshot`)."""
        async with self._sync_lock:
            if snapshot is None:
                snapshot = await self.cluster.voices.remote()
            changed = await pull(self.mirror, snapshot, self.cluster.voice_file.remote)
        if changed:
            logger.info("Voice registry: synced version %d (%d voices)", snapshot["version"], len(snapshot["voices"]))
        return changed

    async def _mirror_now(self, snapshot: Optional[dict] = None) -> None:
        """After a change made in the cluster's registry: mirror it here at once, so this
        replica's next request sees it. A failure is logged, not the request's: the change is
        made, and the long poll brings it."""
        try:
            await self.sync_voices(snapshot)
        except Exception as e:
            logger.warning("Voice registry sync after a change: %s", e)

    async def _follow_voices(self) -> None:
        while True:
            try:
                seen = self.mirror.manifest()  # per directory: a sibling replica may have synced it
                snapshot = await self.cluster.voices.remote(seen["version"], seen["store"], VOICE_POLL_S)
                await self.sync_voices(snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Control restarting, or a malformed local file: keep serving
                logger.warning("Voice registry sync: %s", e)
                await asyncio.sleep(2)

    async def _cluster_call(self, method: str, *args) -> Any:
        result = await getattr(self.cluster, method).remote(*args)
        if isinstance(result, dict) and "error" in result:
            e = result["error"]
            raise APIError(e["status"], e["message"], "invalid_request_error", e["param"], e["code"])
        return result

    async def _store_files(self, files: dict[str, bytes]) -> dict[str, str]:
        """A voice's files stored where every replica that may get its registration can read
        them; {file name: what the registry entry names it by}: a key of the cluster's
        registry, or, with no control plane, a path in the voices/ directory beside the file."""
        if self.cluster is not None:
            return (await self._cluster_call("add_voice_files", files))["keys"]
        for file_name, data in files.items():
            await asyncio.to_thread(atomic_write, self.mirror.dir / file_name, data)
        return {file_name: str(self.mirror.dir / file_name) for file_name in files}

    async def _register(self, name: str, entry: VoiceEntry) -> None:
        """Add or replace a voice: in the cluster's registry, then mirrored here at once (this
        replica's next request already sees it), or in the registry file."""
        self._registry_data(with_startup=False)  # refuse to overwrite a malformed file
        if self.cluster is not None:
            await self._mirror_now(await self._cluster_call("put_voice", name, entry.to_json()))
        else:
            await asyncio.to_thread(self.registry.register, name, entry)

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
            voice = await self._voice(engine, params.voice)
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
                    job.ref_audio = await self._voice_audio(voice.name, voice.ref_audio, engine.sample_rate)
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

    async def _voice(self, engine: TTSEngine, requested: Optional[str]):
        try:
            return self._resolve(engine, requested)
        except APIError as e:
            # Registered on another node a moment ago, before the long poll brought it here?
            if e.status_code != 404 or self.cluster is None:
                raise
            not_found = e
        try:
            changed = await self.sync_voices()
        except Exception as e:
            logger.warning("Voice registry sync: %s", e)
            changed = False
        if not changed:
            raise not_found
        return self._resolve(engine, requested)

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
            "training_unsupported": engine.training_unsupported,  # why voice training cannot run, or None
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
        """Store the reference audio with the voice and add the voice to the registry atomically."""
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
        wav = f"{name}.wav"
        stored = await self._store_files({wav: encode_wav(samples, engine.sample_rate)})
        entry = VoiceEntry(ref_audio=stored[wav], ref_text=ref_text, aliases=list(aliases or []), language=language)
        await self._register(name, entry)
        return {"name": name, "aliases": entry.aliases, "source": "registry"}

    async def cache_conditioning(self, name: str, samples: bytes) -> dict[str, Any]:
        """Voice training: the model's conditioning for a reference (float32 mono at the model's
        rate), computed once and stored with the reference itself (`_store_files`): pocket_tts's
        audio prompt, Qwen3-TTS Base's x-vector and reference codes (model_hooks)."""
        from safetensors.numpy import save

        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        conditioning = await engine.voice_conditioning(audio)
        wav, cached = f"{name}.wav", f"{name}.{engine.model_type}.safetensors"
        # The registration comes in a second call, which may reach a replica on another node.
        stored = await self._store_files({wav: encode_wav(audio, engine.sample_rate), cached: save(conditioning)})
        return {"ref_audio": stored[wav], "conditioning": stored[cached], "conditioning_model": engine.model_id}

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
        `<name>.kokoro.safetensors` (a voice file Kokoro loads by path, `_store_files`), and a
        last event carrying the files for `register_trained_voice`. Runs in a child process of
        this replica (deployments/tts/fit_process.py): syntheses go on, here too; closing the
        stream kills it at once."""
        engine = await self.engine()
        audio = np.frombuffer(samples, dtype="<f4")
        voices = self.registry.path.parent / "voices"
        stock = voices / f".{engine.model_id.replace('/', '--')}.stock-ge2e.npz"
        job = StyleFitJob(audio=audio, steps=steps, language=language, stock_cache=stock, base_voices=base_voices)
        result = None
        async for event in engine.fit_style(job):
            if "pack" in event:
                result = event
            else:
                yield event
        if result is None:  # the engine stopped early: the caller left
            return
        # Stored as cache_conditioning stores: in the cluster's registry when there is one (the
        # registration may reach a replica on another node), else beside the registry file.
        wav, cached = f"{name}.wav", f"{name}.{engine.model_type}.safetensors"
        stored = await self._store_files(
            {wav: encode_wav(audio, engine.sample_rate), cached: _voice_pack_file(result.pop("pack"))}
        )
        files = {"ref_audio": stored[wav], "conditioning": stored[cached], "conditioning_model": engine.model_id}
        yield {**result, "files": files}

    async def register_trained_voice(
        self, name: str, files: dict[str, str], ref_text: str = "", language: Optional[str] = None
    ) -> dict[str, Any]:
        """Voice training's last stage: the voice in the registry, atomically, with the files
        `cache_conditioning` stored."""
        await self._register(name, VoiceEntry(ref_text=ref_text, language=language, **files))
        return {"name": name, "source": "registry", "model": files["conditioning_model"]}

    async def delete_voice(self, name: str) -> dict[str, Any]:
        self._registry_data(with_startup=False)
        if self.cluster is not None and (await self._cluster_call("remove_voice", name))["removed"] is not None:
            await self._mirror_now()  # the mirror drops it and its files, here and on every node
            return {"name": name, "deleted": True}
        # Not the cluster's: an entry written by hand into this node's file.
        entry = await asyncio.to_thread(self.registry.remove, name)
        if entry is None:
            raise APIError(
                404, f"Voice '{name}' is not in the registry", "invalid_request_error", "name", "voice_not_found"
            )
        managed = self.mirror.dir
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
