"""The graph's arguments (`applications[].args` in serve_config.yaml), validated.

OminiX-API's environment variable names override the args, so an OminiX user can switch
without relearning: LLM_MODEL sets the LLM slot's default model. The HTTP port is Ray Serve's
`http_options.port` in serve_config.yaml.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.llm.config import LLMSlotConfig
from deployments.tts.config import TTSSlotConfig


class GraphArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache_dir: Optional[str] = Field(
        None, description="Where built-in models are generated (default ~/.cache/ominix-serve)"
    )
    check_models: bool = Field(
        True, description="Fail start-up when a configured model is neither local nor reachable"
    )
    llm: LLMSlotConfig = Field(default_factory=LLMSlotConfig)
    tts: TTSSlotConfig = Field(default_factory=TTSSlotConfig)

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> "GraphArgs":
        config = cls.model_validate(dict(args or {}))
        return config.with_env(environ)

    def with_env(self, environ: Mapping[str, str]) -> "GraphArgs":
        config = self.model_copy(deep=True)
        llm_model = environ.get("LLM_MODEL", "").strip()
        if llm_model:
            config.llm.default_model = llm_model
        _apply_tts_env(config.tts, environ)
        cache_dir = environ.get("OMINIX_CACHE_DIR", "").strip()
        if cache_dir:
            config.cache_dir = cache_dir
        return config

    def catalog(self) -> dict[str, list[str]]:
        """slot -> allowed model ids (default first), for the ingress."""
        slots = {}
        if self.llm.enabled:
            slots["llm"] = self.llm.allowed_models()
        if self.tts.enabled:
            slots["tts"] = self.tts.allowed_models()
        return slots


def _apply_tts_env(tts: TTSSlotConfig, environ: Mapping[str, str]) -> None:
    """TTS_MODEL (like LLM_MODEL; OminiX-API's QWEN3_TTS_MODEL_DIR works too), and OminiX-API's
    VOICES_CONFIG and TTS_VOICES_DIR."""
    model = environ.get("TTS_MODEL", "").strip() or environ.get("QWEN3_TTS_MODEL_DIR", "").strip()
    if model:
        tts.default_model = model
    voices_config = environ.get("VOICES_CONFIG", "").strip()
    if voices_config:
        tts.voices_config = voices_config
    voices_dir = environ.get("TTS_VOICES_DIR", "").strip()
    if voices_dir:
        tts.voices_dir = voices_dir
