"""A TTS replica's voices: the registry file it resolves requests against, kept in line with
the cluster's voices, and the registrations and deletions it makes.

Voices come from the registry file (re-read when it changes) and the model's presets. With the
control plane, registrations go to the cluster's voice registry in Control (service.py) and
every replica mirrors it into its own registry file (store.py), so a voice registered through a
replica on one node is spoken by replicas on nodes with no shared disk; without it (a graph with
no Control), the file on disk is the only registry.

The library knows the model that speaks only through `Speaker`, the few facts it needs of a TTS
engine (the TTS slot's engines have them), so it imports no slot. No MLX; `cluster` is Control's
handle (or None) and is only called.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Optional, Protocol

import numpy as np

from deployments.audio.encode import encode_wav
from deployments.audio.reference import BadReferenceAudio, read_reference
from deployments.protocol.errors import APIError, invalid_request, server_error
from deployments.voices.registry import (
    RegistryData,
    RegistryError,
    Voice,
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
from deployments.voices.store import VoiceMirror, pull

logger = logging.getLogger("ray.serve")

VOICE_POLL_S = 10.0  # the long poll on the cluster's voice registry
STARTUP_SYNC_S = 60.0


class Speaker(Protocol):
    """What the voice library needs to know of the model that speaks (a TTS engine)."""

    model_id: str
    model_type: str
    sample_rate: int
    presets: list[str]
    default_preset: Optional[str]
    preset_aliases: Mapping[str, str]


def registry_path(voices_config: Optional[str], cache_dir: Path) -> Path:
    """The registry file: tts.voices_config, else <cache_dir>/tts/voices.json."""
    if voices_config:
        return Path(voices_config).expanduser()
    return cache_dir / "tts" / "voices.json"


async def check_startup_voice(ref_audio: Optional[str]) -> Optional[Path]:
    """TTS_REF_AUDIO: checked once at start-up (a replica that cannot use it does not start)."""
    if not ref_audio:
        return None
    path = Path(ref_audio).expanduser().resolve()
    try:
        data = await asyncio.to_thread(path.read_bytes)
        await asyncio.to_thread(read_reference, data, 24000)
    except (OSError, BadReferenceAudio) as e:
        raise RuntimeError(f"TTS_REF_AUDIO / tts.ref_audio {path}: cannot use it as a voice: {e}") from None
    logger.info("Default voice %s from TTS_REF_AUDIO %s", startup_voice_name(path), path)
    return path


async def reference_samples(data: bytes, sample_rate: int, param: str) -> np.ndarray:
    """A reference recording a request sent, at `sample_rate`; a bad one is the request's 400."""
    try:
        return await asyncio.to_thread(read_reference, data, sample_rate)
    except BadReferenceAudio as e:
        raise invalid_request(str(e), param, "invalid_reference_audio") from None


def voice_not_found(message: str, param: str) -> APIError:
    return APIError(404, message, "invalid_request_error", param, "voice_not_found")


class VoiceLibrary:
    def __init__(
        self,
        registry_file: Path,
        voices_dir: Optional[Path] = None,
        startup_voice: Optional[Path] = None,
        startup_text: Optional[str] = None,
        cluster: Any = None,  # Control's handle: it holds the cluster's voices; None: the file alone
    ):
        self.registry = VoiceRegistry(registry_file)
        self.mirror = VoiceMirror(self.registry)
        self.voices_dir = voices_dir
        self.startup_voice = startup_voice
        self.startup_text = startup_text
        self.cluster = cluster
        self._sync_lock = asyncio.Lock()
        self._follower: Optional[asyncio.Task] = None

    @property
    def dir(self) -> Path:
        """The voices/ directory beside the registry file: the files this server stored."""
        return self.mirror.dir

    async def start(self) -> None:
        """Before serving: a new replica (on a new node too) knows every registered voice, then
        follows the cluster's changes."""
        if self.cluster is None:
            return
        try:
            await asyncio.wait_for(self.sync(), STARTUP_SYNC_S)
        except Exception as e:
            logger.warning("Voice registry sync failed (%s); serving the local registry file until it works", e)
        self._follower = asyncio.create_task(self._follow())

    # ------------------------------------------------------------------ the cluster's voices

    async def sync(self, snapshot: Optional[dict] = None) -> bool:
        """Bring this node's registry file to the cluster's voices (the latest, or `snapshot`)."""
        async with self._sync_lock:
            if snapshot is None:
                snapshot = await self._cluster_call("voices")
            changed = await pull(self.mirror, snapshot, self.cluster.voice_file.remote)
        if changed:
            logger.info("Voice registry: synced version %d (%d voices)", snapshot["version"], len(snapshot["voices"]))
        return changed

    async def _mirror_now(self, snapshot: Optional[dict] = None) -> None:
        """After a change made in the cluster's registry: mirror it here at once, so this
        replica's next request sees it. A failure is logged, not the request's: the change is
        made, and the long poll brings it."""
        try:
            await self.sync(snapshot)
        except Exception as e:
            logger.warning("Voice registry sync after a change: %s", e)

    async def _follow(self) -> None:
        while True:
            try:
                seen = self.mirror.manifest()  # per directory: a sibling replica may have synced it
                snapshot = await self._cluster_call("voices", seen["version"], seen["store"], VOICE_POLL_S)
                await self.sync(snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Control restarting, or a malformed local file: keep serving
                logger.warning("Voice registry sync: %s", e)
                await asyncio.sleep(2)

    async def _cluster_call(self, method: str, *args) -> Any:
        try:
            return await getattr(self.cluster, method).remote(*args)
        except Exception as e:
            # Control's refusal arrives wrapped by Ray (an exception that is also the APIError,
            # with it as `cause`): raised here as the plain error, as the request's answer.
            cause = getattr(e, "cause", e)
            if not isinstance(cause, APIError):
                raise
            raise APIError(cause.status_code, cause.message, cause.type, cause.param, cause.code) from None

    # ------------------------------------------------------------------ resolving

    def data(self, with_startup: bool = True) -> RegistryData:
        """The registry as requests see it (with TTS_REF_AUDIO's voice unless `with_startup` is
        False); a malformed file is a 500 naming it."""
        try:
            data = self.registry.data()
        except RegistryError as e:
            raise server_error(f"The voice registry {self.registry.path} is malformed: {e}") from None
        if with_startup and self.startup_voice is not None:
            return with_startup_voice(data, self.startup_voice, self.startup_text)
        return data

    async def resolve(self, requested: Optional[str], speaker: Speaker) -> Voice:
        """The voice a request names (a 404 listing the valid names when there is none)."""
        try:
            return self._resolve(requested, speaker)
        except APIError as e:
            # Registered on another node a moment ago, before the long poll brought it here?
            if e.status_code != 404 or self.cluster is None:
                raise
            not_found = e
        try:
            changed = await self.sync()
        except Exception as e:
            logger.warning("Voice registry sync: %s", e)
            changed = False
        if not changed:
            raise not_found
        return self._resolve(requested, speaker)

    def _resolve(self, requested: Optional[str], speaker: Speaker) -> Voice:
        try:
            return resolve_voice(
                requested,
                self.data(),
                speaker.presets,
                self.voices_dir,
                speaker.default_preset,
                speaker.preset_aliases,
            )
        except VoiceNotFound as e:
            raise voice_not_found(str(e), "voice") from None

    def listing(self, speaker: Speaker) -> dict[str, Any]:
        """The GET /v1/voices body for the model that speaks."""
        return list_voices(self.data(), speaker.presets, speaker.default_preset, speaker.preset_aliases)

    @staticmethod
    async def recording(voice: Voice, sample_rate: int) -> np.ndarray:
        """A voice's reference recording at `sample_rate`: the server's file, so a missing or
        unusable one is a 500."""
        try:
            data = await asyncio.to_thread(voice.ref_audio.read_bytes)
        except OSError:
            raise server_error(f"Voice '{voice.name}' reference audio not found: {voice.ref_audio}") from None
        try:
            return await asyncio.to_thread(read_reference, data, sample_rate)
        except BadReferenceAudio as e:
            raise server_error(f"Voice '{voice.name}' reference audio {voice.ref_audio} is unusable: {e}") from None

    # ------------------------------------------------------------------ changes

    async def store_files(self, files: dict[str, bytes]) -> dict[str, str]:
        """A voice's files stored where every replica that may get its registration can read
        them; {file name: what the registry entry names it by}: a key of the cluster's
        registry, or, with no control plane, a path in the voices/ directory beside the file."""
        if self.cluster is not None:
            return (await self._cluster_call("add_voice_files", files))["keys"]
        for file_name, data in files.items():
            await asyncio.to_thread(atomic_write, self.dir / file_name, data)
        return {file_name: str(self.dir / file_name) for file_name in files}

    async def register(self, name: str, entry: VoiceEntry) -> None:
        """Add or replace a voice: in the cluster's registry, then mirrored here at once (this
        replica's next request already sees it), or in the registry file."""
        self.data(with_startup=False)  # refuse to overwrite a malformed file
        if self.cluster is not None:
            await self._mirror_now(await self._cluster_call("put_voice", name, entry.to_json()))
        else:
            await asyncio.to_thread(self.registry.register, name, entry)

    async def register_recording(
        self,
        speaker: Callable[[], Awaitable[Speaker]],
        name: str,
        audio: bytes,
        ref_text: str = "",
        aliases: Optional[list[str]] = None,
        language: Optional[str] = None,
    ) -> dict[str, Any]:
        """A cloned voice: its names checked (before `speaker` is asked for the model), the
        reference audio stored with it, and the voice added to the registry atomically."""
        try:
            check_voice_name(name)
            for alias in aliases or []:
                check_voice_name(alias)
        except RegistryError as e:
            raise invalid_request(str(e), "name") from None
        model = await speaker()
        if name.lower() in (p.lower() for p in model.presets):
            raise invalid_request(f"'{name}' is a preset voice of the model", "name", "voice_exists")
        samples = await reference_samples(audio, model.sample_rate, "reference_audio")
        wav = f"{name}.wav"
        stored = await self.store_files({wav: encode_wav(samples, model.sample_rate)})
        entry = VoiceEntry(ref_audio=stored[wav], ref_text=ref_text, aliases=list(aliases or []), language=language)
        await self.register(name, entry)
        return {"name": name, "aliases": entry.aliases, "source": "registry"}

    async def store_trained(self, name: str, audio: np.ndarray, speaker: Speaker, cached: bytes) -> dict[str, str]:
        """Voice training's files (the clip, and the model's conditioning or fitted pack as
        `<name>.<model type>.safetensors`), stored for a registration that comes in a second
        call, which may reach a replica on another node; the files `register_trained` takes."""
        wav, conditioning = f"{name}.wav", f"{name}.{speaker.model_type}.safetensors"
        stored = await self.store_files({wav: encode_wav(audio, speaker.sample_rate), conditioning: cached})
        return {"ref_audio": stored[wav], "conditioning": stored[conditioning], "conditioning_model": speaker.model_id}

    async def register_trained(
        self, name: str, files: dict[str, str], ref_text: str = "", language: Optional[str] = None
    ) -> dict[str, Any]:
        """Voice training's last stage: the voice in the registry, atomically, with the files
        `store_trained` stored."""
        await self.register(name, VoiceEntry(ref_text=ref_text, language=language, **files))
        return {"name": name, "source": "registry", "model": files["conditioning_model"]}

    async def delete(self, name: str) -> dict[str, Any]:
        self.data(with_startup=False)
        if self.cluster is not None and (await self._cluster_call("remove_voice", name))["removed"] is not None:
            await self._mirror_now()  # the mirror drops it and its files, here and on every node
            return {"name": name, "deleted": True}
        # Not the cluster's: an entry written by hand into this node's file.
        entry = await asyncio.to_thread(self.registry.remove, name)
        if entry is None:
            raise voice_not_found(f"Voice '{name}' is not in the registry", "name")
        audio = Path(entry.ref_audio)
        if audio.parent == self.dir:  # only files this server stored; never a user's own file
            audio.unlink(missing_ok=True)
        if entry.conditioning and Path(entry.conditioning).parent == self.dir:
            Path(entry.conditioning).unlink(missing_ok=True)
        return {"name": name, "deleted": True}
