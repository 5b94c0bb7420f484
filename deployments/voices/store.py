"""The voice registry held by the cluster, so TTS replicas on nodes without a shared disk agree.

Two halves, both free of Ray and MLX:

- `VoiceStore`, kept by the Control deployment (one replica): the registered voices (voices.json's
  schema) and their files (reference recordings, voice training's cached conditioning) as bytes
  in its own directory, with a version that every change bumps. It lives on disk on Control's
  node, so a restarted Control replica, a redeploy or a restarted cluster (Control on the same
  node, as docs/multi-node.md pins it) finds every voice again.
- `VoiceMirror`, kept by each TTS replica: applies a store snapshot to the replica's own registry
  file (tts.voices_config, default <cache_dir>/tts/voices.json) and the voices/ directory beside
  it. The cluster's voices are upserted into that file with local paths; entries an operator
  wrote by hand stay as they are, and a voice the cluster removed leaves the file. The file stays
  what requests resolve against, exactly as in a single-node graph, and what OminiX users read.

File keys are content-addressed (`<sha256 prefix>-<name>`): a voice registered again under the same
name gets a new key, so a mirror can never keep serving the old recording under the new entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Optional

from deployments.voices.registry import (
    RegistryData,
    RegistryError,
    VoiceEntry,
    VoiceRegistry,
    atomic_write,
    check_voice_name,
)

logger = logging.getLogger("ray.serve")

# A reference clip is at most 60 s (audio/reference.py): 2.9 MB as the 16-bit wav the TTS slot
# stores; a conditioning tensor is of the same order. Anything larger is not a voice.
MAX_VOICE_FILE_BYTES = 8 * 1024 * 1024
MAX_STORE_BYTES = 1024 * 1024 * 1024  # Control's disk, and every speech node's mirror
# Files added for a registration still to come (voice training adds them a stage earlier);
# unreferenced ones older than this are deleted.
STAGED_TTL_S = 3600.0
KEY_PATTERN = re.compile(r"^[0-9a-f]{16}-[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
FILE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
FILE_FIELDS = ("ref_audio", "conditioning")
MANIFEST = ".cluster.json"


class VoiceStoreError(ValueError):
    """A registration the store refuses; `status`, `code` and `param` make the HTTP error
    (service.py raises it as an `APIError`)."""

    def __init__(self, message: str, status: int = 400, code: str = "invalid_voice", param: Optional[str] = None):
        super().__init__(message)
        self.message, self.status, self.code, self.param = message, status, code, param


def file_key(name: str, data: bytes) -> str:
    return f"{hashlib.sha256(data).hexdigest()[:16]}-{name}"


class VoiceStore:
    """The cluster's voices, persisted under `root` (registry.json + files/)."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time):
        self.root = Path(root).expanduser()
        self.files_dir = self.root / "files"
        self.index = self.root / "registry.json"
        self.clock = clock
        self.store_id = uuid.uuid4().hex
        self.version = 0
        self.data = RegistryData(models_base_path="")
        if self.index.exists():
            self._restore()
        self.gc()

    def _restore(self) -> None:
        try:
            raw = json.loads(self.index.read_text(encoding="utf-8"))
            data = RegistryData.parse(json.dumps({"voices": raw.get("voices", {})}))
            self.store_id, self.version, self.data = str(raw["store"]), int(raw["version"]), data
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            # Control must start whatever the disk holds: the graph depends on it. A new store
            # (new id) it is; nodes keep the voices they mirrored as plain local entries.
            aside = self.index.with_name(f"registry.json.unreadable-{int(self.clock())}")
            self.index.replace(aside)
            logger.error("Voice store %s is unreadable (%s): moved to %s, starting empty", self.index, e, aside)

    def snapshot(self) -> dict[str, Any]:
        """What a mirror needs: the store's identity, its version, every voice (file fields are keys)."""
        return {"store": self.store_id, "version": self.version, "voices": self.data.to_json()["voices"]}

    def add_files(self, files: dict[str, bytes]) -> dict[str, str]:
        """Store files under content keys; returns {given name: key}. A voice refers to them by key."""
        for name, data in files.items():
            if not FILE_NAME_PATTERN.match(name):
                raise VoiceStoreError(f"file name '{name}' is not allowed", param="name")
            if len(data) > MAX_VOICE_FILE_BYTES:
                raise VoiceStoreError(
                    f"voice file '{name}' is {len(data)} bytes; the cluster's voice registry holds files of at "
                    f"most {MAX_VOICE_FILE_BYTES} bytes (a reference clip of up to 60 s is far smaller)",
                    status=413,
                    code="voice_file_too_large",
                )
        incoming = sum(len(d) for d in files.values())
        if self.size() + incoming > MAX_STORE_BYTES:
            raise VoiceStoreError(
                f"the cluster's voice registry is full ({MAX_STORE_BYTES} bytes): remove voices first",
                status=413,
                code="voice_registry_full",
            )
        keys = {}
        for name, data in files.items():
            keys[name] = key = file_key(name, data)
            path = self.files_dir / key
            if path.exists():
                path.touch()  # staged again: restart its time to live
            else:
                atomic_write(path, data)
        return keys

    def put(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a voice whose file fields are keys of files already added."""
        try:
            check_voice_name(name)
            voice = VoiceEntry.from_json(name, entry)
        except RegistryError as e:
            raise VoiceStoreError(str(e), param="name") from None
        voice.codes_path = None  # a path on one node's disk: meaningless to the others
        for field in FILE_FIELDS:
            key = getattr(voice, field)
            if key is not None and not self._has(key):
                raise VoiceStoreError(f"voice '{name}': {field} '{key}' is not a file of the store", param=field)
        self.data.put(name, voice)
        self._changed()
        return self.snapshot()

    def remove(self, name: str) -> Optional[dict[str, Any]]:
        """Remove a voice by name or alias; its entry, or None when the store has no such voice."""
        entry = self.data.pop(name)
        if entry is None:
            return None
        self._changed()
        return entry.to_json()

    def read_file(self, key: str) -> bytes:
        if not self._has(key):
            raise VoiceStoreError(f"no voice file '{key}' in the cluster's registry", status=404, code="not_found")
        return (self.files_dir / key).read_bytes()

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files_dir.glob("*") if p.is_file())

    def referenced(self) -> set[str]:
        return {key for entry in self.data.voices.values() for key in entry_keys(entry)}

    def gc(self) -> None:
        """Delete files no voice refers to, once they are older than a registration could be."""
        if not self.files_dir.is_dir():
            return
        keep, now = self.referenced(), self.clock()
        for path in self.files_dir.iterdir():
            if path.name not in keep and now - path.stat().st_mtime > STAGED_TTL_S:
                path.unlink(missing_ok=True)

    def _has(self, key: str) -> bool:
        return bool(KEY_PATTERN.match(key)) and (self.files_dir / key).is_file()

    def _changed(self) -> None:
        self.version += 1
        body = {"store": self.store_id, "version": self.version, "voices": self.data.to_json()["voices"]}
        atomic_write(self.index, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        self.gc()


def entry_keys(entry: VoiceEntry) -> list[str]:
    return [key for key in (entry.ref_audio, entry.conditioning) if key]


class VoiceMirror:
    """A replica's local copy of the store, kept in its registry file and the voices/ beside it.

    Replicas on one node share the directory: `apply` holds a file lock, and a snapshot older
    than what the directory already has is a no-op."""

    def __init__(self, registry: VoiceRegistry):
        self.registry = registry
        self.dir = registry.path.parent / "voices"
        self.manifest_path = self.dir / MANIFEST
        self.lock_path = registry.path.parent / ".voices.lock"

    def manifest(self) -> dict[str, Any]:
        """What the last applied snapshot was: store, version, the voices and files it owns."""
        try:
            return json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"store": None, "version": -1, "names": [], "files": []}

    def is_current(self, snapshot: dict[str, Any]) -> bool:
        """This directory has the snapshot's version, and the registry file still names every
        voice of it: a file an operator or a restore replaced is mirrored again."""
        return self._is_current(self.manifest(), snapshot)

    def _is_current(self, manifest: dict[str, Any], snapshot: dict[str, Any]) -> bool:
        if manifest["store"] != snapshot["store"] or manifest["version"] < snapshot["version"]:
            return False
        data = self.registry.data()
        return all(data.find(name) is not None for name in snapshot["voices"])

    def missing(self, snapshot: dict[str, Any]) -> list[str]:
        """The snapshot's file keys this node does not have yet."""
        return sorted(k for k in snapshot_keys(snapshot) if not (self.dir / k).is_file())

    def apply(self, snapshot: dict[str, Any], files: dict[str, bytes]) -> bool:
        """Bring the registry file and voices/ to `snapshot`; `files` holds the missing keys'
        bytes. False when the directory already had that version (another replica applied it)."""
        with self._locked():
            old = self.manifest()
            if self._is_current(old, snapshot):
                return False
            for key, data in files.items():
                if not KEY_PATTERN.match(key):
                    raise RegistryError(f"refusing voice file key '{key}'")
                atomic_write(self.dir / key, data)
            absent = self.missing(snapshot)
            if absent:
                raise RegistryError(f"voice files missing from the sync: {', '.join(absent)}")
            # Another store (Control moved to a node without this one's directory, or its
            # directory was wiped): what the old one gave stays as plain local voices rather
            # than vanishing on an ambiguous signal.
            same_store = old["store"] == snapshot["store"]
            owned_files = {str(self.dir / k) for k in old["files"]} if same_store else set()
            gone = [n for n in old["names"] if n not in snapshot["voices"]] if same_store else []
            voices = {name: self._local(name, raw) for name, raw in snapshot["voices"].items()}

            def change(data: RegistryData) -> bool:
                for name in gone:
                    key = data.find(name)
                    # Only while it is still the cluster's entry: a hand edit since then is the operator's.
                    if key is not None and data.voices[key].ref_audio in owned_files:
                        data.voices.pop(key)
                for name, entry in voices.items():
                    data.put(name, entry)
                return True

            self.registry.update(change)
            new_files = sorted(snapshot_keys(snapshot))
            manifest = {
                "store": snapshot["store"],
                "version": snapshot["version"],
                "names": sorted(snapshot["voices"]),
                "files": new_files,
            }
            atomic_write(self.manifest_path, json.dumps(manifest, indent=2).encode("utf-8"))
            if same_store:
                for key in set(old["files"]) - set(new_files):
                    (self.dir / key).unlink(missing_ok=True)
            return True

    def _local(self, name: str, raw: dict[str, Any]) -> VoiceEntry:
        entry = VoiceEntry.from_json(name, raw)
        entry.ref_audio = str(self.dir / entry.ref_audio)
        if entry.conditioning:
            entry.conditioning = str(self.dir / entry.conditioning)
        return entry

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def snapshot_keys(snapshot: dict[str, Any]) -> set[str]:
    return {raw[f] for raw in snapshot["voices"].values() for f in FILE_FIELDS if raw.get(f)}


async def pull(mirror: VoiceMirror, snapshot: dict[str, Any], read_file: Callable[[str], Awaitable[bytes]]) -> bool:
    """Sync a mirror to a snapshot, fetching only the files this node lacks."""
    if mirror.is_current(snapshot):
        return False
    files = {key: await read_file(key) for key in mirror.missing(snapshot)}
    return await asyncio.to_thread(mirror.apply, snapshot, files)
