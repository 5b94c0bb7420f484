"""Configuration of the TTS slot (the `tts:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Optional

from pydantic import Field, field_validator

from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig
from deployments.tts.tiny_model import TINY_TTS_ID

# OminiX-API's TTS families -> a pattern their model ids match; /v1/audio/tts/qwen3, /tts/clone
# and /tts/sovits need a model of theirs (a `model` alias only names the slot).
# OpenAI's model names (its SDK requires one): the slot's default here, as in OminiX-API.
OPENAI_NAMES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
FAMILIES = {"qwen3-tts": r"qwen3[-_]?tts", "gpt-sovits": r"sovits"}


class TTSSlotConfig(SlotModelsConfig):
    families: ClassVar[dict[str, str]] = FAMILIES
    default_model: str = Field(TINY_TTS_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict.fromkeys((*FAMILIES, *OPENAI_NAMES), SLOT_DEFAULT),
        description=(
            "Other names requests may use as `model` (OminiX-API's gpt-sovits, qwen3-tts; OpenAI's tts-1, "
            "tts-1-hd, gpt-4o-mini-tts) -> an allowed id or `default`"
        ),
    )
    max_input_chars: int = Field(4096, ge=1, description="Longer `input` (or WebSocket text) is a 400")
    streaming_interval_s: float = Field(
        0.24, gt=0, description="Audio per streamed chunk for models that stream (seconds)"
    )
    voices_config: Optional[str] = Field(
        None,
        description=(
            "Voice registry file (OminiX voices.json) on each speech node, into which every replica mirrors "
            "the cluster's voices; default <cache_dir>/tts/voices.json"
        ),
    )
    voices_dir: Optional[str] = Field(
        None, description="TTS_VOICES_DIR: requests may name audio files inside it as voices"
    )
    ref_audio: Optional[str] = Field(
        None,
        description=(
            "TTS_REF_AUDIO: a reference recording every replica registers at start-up as the default voice "
            "(named after the file; not written to the registry file)"
        ),
    )
    ref_text: Optional[str] = Field(None, description="What ref_audio says (models that use a transcript)")
    ws_idle_timeout_s: float = Field(120.0, gt=0, description="WebSocket TTS: close after this long without a message")
    clone_model: Optional[str] = Field(
        None,
        description=(
            "Speaks registry (and voices_dir) voices made from reference audio when a request names no model "
            "and the default cannot clone (Kokoro); allowed like the default. None: such requests are 400s"
        ),
    )

    @field_validator("ref_audio")
    @classmethod
    def _ref_audio_is_a_file(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not Path(value).expanduser().is_file():
            raise ValueError(f"{value} is not a file")
        return value

    def allowed_models(self) -> list[str]:
        # The cloning model is served without being named, so it is allowed like the default.
        return list(dict.fromkeys([*super().allowed_models(), *([self.clone_model] if self.clone_model else [])]))

    def max_ongoing_requests(self) -> int:
        # One synthesis runs at a time per replica (the model's decoder state is per stream);
        # a few wait in it so the next starts at once, the rest wait where autoscaling sees them.
        return 4
