"""Voices: the registry file (OminiX-API's voices.json schema) and how a request's `voice`
resolves to something a model can speak with.

The file on disk is the source of truth: every replica re-reads it when its modification
time or size changes, and writes replace it atomically (temporary file + `os.replace`), so a
voice registered through one replica is usable on all of them without a restart and a crash
never leaves a torn file.

Resolution of a requested name, case-insensitive, first hit wins:
registry name -> registry alias -> the model's preset voices -> a file path inside
TTS_VOICES_DIR (relative, no `..`; or absolute under that dir). Anything else is a
`VoiceNotFound` listing the valid names: never a silent fallback to another voice.

Pure Python: no Ray, no MLX.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar

DEFAULT_VOICE_NAMES = ("", "default")
T = TypeVar("T")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class VoiceNotFound(LookupError):
    def __init__(self, requested: str, available: list[str]):
        self.requested = requested
        self.available = available
        listed = ", ".join(available) if available else "none"
        super().__init__(f"Voice '{requested}' is not available. Available voices: {listed}")


class RegistryError(ValueError):
    """The registry file is malformed, or a registration is invalid; the message says why."""


@dataclass(frozen=True)
class Voice:
    """What a model needs to speak with a voice."""

    name: str
    source: str  # "registry" | "preset" | "file"
    preset: Optional[str] = None  # a model preset's name
    ref_audio: Optional[Path] = None  # a reference recording for cloning
    ref_text: Optional[str] = None
    speed_factor: float = 1.0
    conditioning: Optional[Path] = None  # computed once by voice training, for one model
    conditioning_model: Optional[str] = None


@dataclass
class VoiceEntry:
    ref_audio: str
    ref_text: str = ""
    codes_path: Optional[str] = None
    speed_factor: float = 1.0
    aliases: list[str] = field(default_factory=list)
    language: Optional[str] = None
    source: str = "registry"  # "startup": TTS_REF_AUDIO's voice, never written to the file
    # Voice training's cached conditioning (a .safetensors file) and the model it belongs to.
    conditioning: Optional[str] = None
    conditioning_model: Optional[str] = None

    @classmethod
    def from_json(cls, name: str, raw: Any) -> VoiceEntry:
        if not isinstance(raw, dict) or not isinstance(raw.get("ref_audio"), str):
            raise RegistryError(f"voice '{name}' needs a 'ref_audio' path")
        aliases = [a for a in raw.get("aliases") or [] if isinstance(a, str)]
        speed = raw.get("speed_factor")
        return cls(
            ref_audio=raw["ref_audio"],
            ref_text=raw.get("ref_text") or "",
            codes_path=raw.get("codes_path"),
            speed_factor=float(speed) if isinstance(speed, (int, float)) else 1.0,
            aliases=aliases,
            language=raw.get("language") if isinstance(raw.get("language"), str) else None,
            conditioning=raw.get("conditioning") if isinstance(raw.get("conditioning"), str) else None,
            conditioning_model=raw.get("conditioning_model")
            if isinstance(raw.get("conditioning_model"), str)
            else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ref_audio": self.ref_audio, "ref_text": self.ref_text, "aliases": self.aliases}
        if self.codes_path:
            out["codes_path"] = self.codes_path
        if self.speed_factor != 1.0:
            out["speed_factor"] = self.speed_factor
        if self.language:
            out["language"] = self.language
        if self.conditioning:
            out["conditioning"] = self.conditioning
            out["conditioning_model"] = self.conditioning_model
        return out


@dataclass
class RegistryData:
    default_voice: Optional[str] = None
    models_base_path: str = "~/.OminiX/models"
    voices: dict[str, VoiceEntry] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> RegistryData:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise RegistryError(f"not valid JSON: {e}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("voices", {}), dict):
            raise RegistryError("expected an object with a 'voices' object")
        return cls(
            default_voice=raw.get("default_voice") or None,
            models_base_path=raw.get("models_base_path") or "~/.OminiX/models",
            voices={name: VoiceEntry.from_json(name, v) for name, v in raw.get("voices", {}).items()},
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.default_voice:
            out["default_voice"] = self.default_voice
        out["models_base_path"] = self.models_base_path
        out["voices"] = {name: self.voices[name].to_json() for name in sorted(self.voices)}
        return out

    def base_path(self) -> Path:
        return Path(self.models_base_path).expanduser()

    def path_of(self, value: str) -> Path:
        """A registry path: `~` expanded, relative ones against models_base_path."""
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base_path() / path

    def put(self, name: str, entry: VoiceEntry) -> VoiceEntry:
        """Add or replace a voice: one entry per name, whatever its case."""
        existing = self.find(name)
        if existing is not None and existing != name:
            self.voices.pop(existing)
        self.voices[name] = entry
        return entry

    def pop(self, name: str) -> Optional[VoiceEntry]:
        """Remove a voice by name or alias; returns it, or None if there was none."""
        key = self.find(name)
        return self.voices.pop(key) if key is not None else None

    def find(self, requested: str) -> Optional[str]:
        """The registry key for a name or alias, case-insensitively (alphabetical on ties)."""
        wanted = requested.lower()
        names = sorted(self.voices)
        for name in names:
            if name.lower() == wanted:
                return name
        for name in names:
            if any(alias.lower() == wanted for alias in self.voices[name].aliases):
                return name
        return None


class VoiceRegistry:
    """The registry file, re-read when it changes on disk; thread-safe."""

    def __init__(self, path: Path):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self._stamp: Optional[tuple[int, int]] = None
        self._data = RegistryData()

    def data(self) -> RegistryData:
        with self._lock:
            return self._load_if_changed()

    def _load_if_changed(self) -> RegistryData:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._data = None, RegistryData()
            return self._data
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._data = RegistryData.parse(self.path.read_text(encoding="utf-8"))
            self._stamp = stamp
        return self._data

    def register(self, name: str, entry: VoiceEntry) -> None:
        """Add or replace a voice; the file is rewritten atomically."""
        self.update(lambda data: data.put(name, entry))

    def remove(self, name: str) -> Optional[VoiceEntry]:
        """Remove a voice by name or alias; returns it, or None if there was none."""
        return self.update(lambda data: data.pop(name))

    def update(self, change: Callable[[RegistryData], T]) -> T:
        """Apply `change` to the current content and rewrite the file atomically (not at all
        when `change` returns None: nothing changed). Returns what `change` returned."""
        with self._lock:
            data = self._load_if_changed()
            result = change(data)
            if result is not None:
                self._write(data)
            return result

    def _write(self, data: RegistryData) -> None:
        text = json.dumps(data.to_json(), indent=2, ensure_ascii=False) + "\n"
        atomic_write(self.path, text.encode("utf-8"))
        self._stamp = None  # re-read (and re-stamp) on next access


def atomic_write(path: Path, data: bytes) -> None:
    """Write a file so readers see the old or the new content, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_voice_name(name: str) -> str:
    if not NAME_PATTERN.match(name or ""):
        raise RegistryError(
            "voice name must be 1-64 characters: letters, digits, '_', '-', '.', starting with a letter or digit"
        )
    if name.lower() in DEFAULT_VOICE_NAMES:
        raise RegistryError(f"'{name}' is reserved")
    return name


def safe_voice_file(requested: str, voices_dir: Optional[Path]) -> Optional[Path]:
    """`requested` as an existing file inside `voices_dir`, or None (never outside it)."""
    if voices_dir is None or not requested:
        return None
    root = Path(voices_dir).expanduser().resolve()
    candidate = Path(requested).expanduser()
    if not candidate.is_absolute():
        # The raw components: pathlib would silently drop "." ones.
        if any(part in ("..", ".") for part in re.split(r"[/\\]", requested)):
            return None
        candidate = root / candidate
    try:
        resolved = candidate.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_file() or not resolved.is_relative_to(root):
        return None  # a symlink or absolute path leading out of the directory
    return resolved


def resolve_voice(
    requested: Optional[str],
    registry: RegistryData,
    presets: list[str],
    voices_dir: Optional[Path] = None,
    model_default: Optional[str] = None,
    preset_aliases: Optional[Mapping[str, str]] = None,
) -> Voice:
    """The voice to synthesize with; raises `VoiceNotFound` with the valid names. The registry
    wins over presets, presets over their aliases (OpenAI's names for Kokoro's), those over files."""
    name = (requested or "").strip()
    if name.lower() in DEFAULT_VOICE_NAMES:
        name = registry.default_voice or model_default or (presets[0] if presets else "")
        if not name:
            raise VoiceNotFound(requested or "default", available_names(registry, presets))
    key = registry.find(name)
    if key is not None:
        entry = registry.voices[key]
        return Voice(
            name=key,
            source="registry",
            ref_audio=registry.path_of(entry.ref_audio),
            ref_text=entry.ref_text or None,
            speed_factor=entry.speed_factor,
            conditioning=registry.path_of(entry.conditioning) if entry.conditioning else None,
            conditioning_model=entry.conditioning_model,
        )
    for preset in presets:
        if preset.lower() == name.lower():
            return Voice(name=preset, source="preset", preset=preset)
    preset = {a.lower(): p for a, p in (preset_aliases or {}).items()}.get(name.lower())
    if preset is not None:
        return Voice(name=preset, source="preset", preset=preset)
    path = safe_voice_file(name, voices_dir)
    if path is not None:
        return Voice(name=name, source="file", ref_audio=path)
    raise VoiceNotFound(name, available_names(registry, presets))


def with_startup_voice(registry: RegistryData, path: Path, ref_text: Optional[str]) -> RegistryData:
    """The registry as requests see it with TTS_REF_AUDIO set: its recording is a voice named
    after the file (`reference` for reference.wav), and the default voice. Every replica adds
    it in memory at start-up; the file on disk stays as the operator wrote it."""
    name = startup_voice_name(path)
    entry = VoiceEntry(ref_audio=str(path), ref_text=ref_text or "", source="startup")
    voices = {key: v for key, v in registry.voices.items() if key.lower() != name.lower()}
    return RegistryData(default_voice=name, models_base_path=registry.models_base_path, voices={**voices, name: entry})


def startup_voice_name(path: Path) -> str:
    """A valid voice name from the file's stem (other characters become '_')."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(path).stem).lstrip("_.-")[:64] or "reference"
    return "reference" if stem.lower() in DEFAULT_VOICE_NAMES else stem


def available_names(registry: RegistryData, presets: list[str]) -> list[str]:
    names = sorted(registry.voices)
    taken = {n.lower() for n in names}
    return names + [p for p in presets if p.lower() not in taken]


def list_voices(
    registry: RegistryData,
    presets: list[str],
    model_default: Optional[str] = None,
    preset_aliases: Optional[Mapping[str, str]] = None,
) -> dict[str, Any]:
    """The GET /v1/voices body: registry voices (alphabetical), then the model's presets (with
    the other names they answer to)."""
    voices: list[dict[str, Any]] = []
    for name in sorted(registry.voices):
        entry = registry.voices[name]
        item: dict[str, Any] = {"name": name, "aliases": entry.aliases, "source": entry.source}
        if entry.language:
            item["language"] = entry.language
        voices.append(item)
    taken = {v["name"].lower() for v in voices}
    aliases: dict[str, list[str]] = {}
    for alias, preset in (preset_aliases or {}).items():
        aliases.setdefault(preset, []).append(alias)
    voices += [
        {"name": p, "aliases": sorted(aliases.get(p, [])), "source": "preset"}
        for p in presets
        if p.lower() not in taken
    ]
    default = registry.default_voice or model_default or (presets[0] if presets else None)
    return {"default_voice": default, "voices": voices}
