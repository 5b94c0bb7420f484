"""Configuration of the TTS slot (the `tts:` block of the graph args)."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from deployments.control.policy import SlotModelsConfig
from deployments.tts.tiny_model import TINY_TTS_ID


class TTSSlotConfig(SlotModelsConfig):
    default_model: str = Field(TINY_TTS_ID, description="Served when a request names no model; loaded at start-up")
    max_input_chars: int = Field(4096, ge=1, description="Longer `input` (or WebSocket text) is a 400")
    streaming_interval_s: float = Field(
        0.24, gt=0, description="Audio per streamed chunk for models that stream (seconds)"
    )
    voices_config: Optional[str] = Field(
        None, description="Voice registry file (OminiX voices.json); default <cache_dir>/tts/voices.json"
    )
    voices_dir: Optional[str] = Field(
        None, description="TTS_VOICES_DIR: requests may name audio files inside it as voices"
    )
    ws_idle_timeout_s: float = Field(120.0, gt=0, description="WebSocket TTS: close after this long without a message")

    def max_ongoing_requests(self) -> int:
        # One synthesis runs at a time per replica (the model's decoder state is per stream);
        # a few wait in it so the next starts at once, the rest wait where autoscaling sees them.
        return 4
