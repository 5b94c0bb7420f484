"""Configuration of the ASR slot (the `asr:` block of the graph args) and OminiX-API's
batching modes (ASR_MODE / ASR_MAX_BATCH)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal, Optional

from pydantic import Field, field_validator

from deployments.asr.tiny_model import TINY_WHISPER_ID
from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID
from deployments.diarization.config import DEFAULT_THRESHOLD, DiarizationConfig
from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig

logger = logging.getLogger(__name__)


def whisper_dtype(setting: str, on_cpu: bool) -> str:
    """The dtype Whisper computes in: `asr.dtype`, where `auto` is float32 on MLX's CPU backend
    (float16 is slower there, measured) and float16 on a GPU, Metal or CUDA alike."""
    if setting != "auto":
        return setting
    return "float32" if on_cpu else "float16"


@dataclass(frozen=True)
class BatchingMode:
    name: str
    max_batch_size: int
    wait_s: float


# OminiX-API's presets (max batch, wait window) and their aliases.
MODES = {
    "off": BatchingMode("off", 1, 0.0),
    "interactive": BatchingMode("interactive", 4, 0.010),
    "conversational": BatchingMode("conversational", 8, 0.025),
    "offline": BatchingMode("offline", 32, 0.150),
}
MODE_ALIASES = {
    "none": "off",
    "1": "off",
    "low-latency": "interactive",
    "balanced": "conversational",
    "default": "conversational",
    "batch": "offline",
    "throughput": "offline",
}
DEFAULT_MODE = "conversational"

# OpenAI's model names, which its SDK's users write (`model` is required there) and OminiX-API
# serves with whatever is loaded: here they name the slot's default.
OPENAI_NAMES = ("whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe")
# OminiX-API's ASR families (and MiniInfer's) -> a pattern their model ids match. The two with a
# route of their own (/v1/audio/asr/qwen3, /v1/audio/asr/paraformer) need a model of the family.
FAMILIES = {
    "qwen3-asr": r"qwen3[-_]?asr",
    "paraformer": r"paraformer",
    "sensevoice": r"sensevoice",
    "fireredasr2": r"firered",
}


def parse_mode(value: Optional[str]) -> str:
    """A preset name from a mode or alias (trimmed, case-insensitive); unknown -> default."""
    name = (value or "").strip().lower()
    name = MODE_ALIASES.get(name, name)
    if name not in MODES:
        logger.warning("Unknown ASR mode %r; using %r", value, DEFAULT_MODE)
        return DEFAULT_MODE
    return name


def effective_batching(mode: str, max_batch: Optional[int]) -> BatchingMode:
    """The preset, with `max_batch` overriding its size; no waiting when batches hold one."""
    preset = MODES[parse_mode(mode)]
    size = max_batch if max_batch is not None else preset.max_batch_size
    wait = preset.wait_s if size > 1 else 0.0
    return BatchingMode(preset.name, size, wait)


class ASRSlotConfig(SlotModelsConfig):
    families: ClassVar[dict[str, str]] = FAMILIES
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys((*FAMILIES, *OPENAI_NAMES), SLOT_DEFAULT),
        description=(
            "Other names requests may use as `model` (OminiX-API's paraformer, qwen3-asr, sensevoice; OpenAI's "
            "whisper-1, gpt-4o-transcribe, gpt-4o-mini-transcribe) -> an allowed id or `default`"
        ),
    )
    default_model: str = Field(
        WHISPER_TINY_EN_ID, description="Served when a request names no model; loaded at start-up"
    )
    models: list[str] = Field(
        default_factory=lambda: [TINY_WHISPER_ID],
        description="Other model ids requests may name (the allow-list)",
    )
    max_models_per_replica: int = Field(
        2, ge=1, description="Models one replica keeps loaded at once (the least recently used is evicted)"
    )
    mode: str = Field(DEFAULT_MODE, description="off | interactive | conversational | offline")
    max_batch: Optional[int] = Field(None, ge=1, description="Overrides the mode's batch size")
    dtype: Literal["auto", "float16", "float32"] = Field(
        "auto", description="auto: float16 on a GPU (Metal, CUDA), float32 on MLX's CPU backend (faster there)"
    )
    cpu_kernels: bool = Field(
        True,
        description="Whisper on MLX's CPU backend: attention, GELU and logits through numpy (deployments/kernels/whisper.py); false: MLX's own ops",
    )
    max_upload_mb: float = Field(100.0, gt=0, description="Larger audio uploads are a 413")
    max_duration_s: float = Field(3 * 3600.0, gt=0, description="Longer audio is a 400")
    max_chunk_s: float = Field(30.0, gt=1, le=30, description="Longest piece VAD hands the model")
    vad: Literal["energy", "silero"] = Field(
        "energy", description="What cuts a file into windows: the energy VAD or Silero (bench --scenarios vad)"
    )
    files_dir: Optional[str] = Field(None, description="JSON requests may name server files inside this directory only")
    diarization: bool = Field(
        True, description="Speaker diarization (diarize=true, diarized_json, /v1/audio/diarization)"
    )
    diarization_threshold: float = Field(
        DEFAULT_THRESHOLD,
        gt=0,
        lt=2,
        description="Mean cosine distance (average linkage) above which two voices are different speakers (lower: more speakers)",
    )
    stream_max_sessions: int = Field(
        32, ge=1, description="Live streaming sessions per replica (POST /v1/audio/stream/sessions); beyond: 429"
    )
    stream_idle_timeout_s: float = Field(600.0, gt=0, description="A streaming session idle this long is reclaimed")
    stream_max_chunk_s: float = Field(
        30.0, gt=0, le=60, description="Longest PCM chunk one streaming request may carry (larger: 400)"
    )
    stream_partial_every_s: float = Field(
        0.5, ge=0.1, description="A session's partial hypothesis is re-decoded at most once per this much new audio"
    )
    stream_pause_s: float = Field(0.7, gt=0, description="A pause this long after speech finalises the utterance")

    @field_validator("mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        return parse_mode(value)

    def diarization_config(self) -> DiarizationConfig:
        return DiarizationConfig(threshold=self.diarization_threshold, known_max_distance=self.diarization_threshold)

    def batching(self) -> BatchingMode:
        return effective_batching(self.mode, self.max_batch)

    def max_ongoing_requests(self) -> int:
        # Audio is decoded before it joins a batch: room for two full batches, at least 64.
        return max(64, 2 * self.batching().max_batch_size)
