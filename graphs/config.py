"""The graph's arguments (`applications[].args` in serve_config.yaml), validated.

OminiX-API's environment variable names override the args, so an OminiX user can switch
without relearning: LLM_MODEL sets the LLM slot's default model. The HTTP port is Ray Serve's
`http_options.port` in serve_config.yaml.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.asr.config import ASRSlotConfig, parse_mode
from deployments.llm.config import LLMSlotConfig


class GraphArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache_dir: Optional[str] = Field(
        None, description="Where built-in models are generated (default ~/.cache/ominix-serve)"
    )
    check_models: bool = Field(
        True, description="Fail start-up when a configured model is neither local nor reachable"
    )
    llm: LLMSlotConfig = Field(default_factory=LLMSlotConfig)
    asr: ASRSlotConfig = Field(default_factory=ASRSlotConfig)

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> "GraphArgs":
        config = cls.model_validate(dict(args or {}))
        return config.with_env(environ)

    def with_env(self, environ: Mapping[str, str]) -> "GraphArgs":
        config = self.model_copy(deep=True)
        llm_model = environ.get("LLM_MODEL", "").strip()
        if llm_model:
            config.llm.default_model = llm_model
        _asr_env(config.asr, environ)
        cache_dir = environ.get("OMINIX_CACHE_DIR", "").strip()
        if cache_dir:
            config.cache_dir = cache_dir
        return config

    def catalog(self) -> dict[str, list[str]]:
        """slot -> allowed model ids (default first), for the ingress."""
        slots = {}
        if self.llm.enabled:
            slots["llm"] = self.llm.allowed_models()
        if self.asr.enabled:
            slots["asr"] = self.asr.allowed_models()
        return slots


def _asr_env(asr: ASRSlotConfig, environ: Mapping[str, str]) -> None:
    """OminiX-API's ASR variables: ASR_MODEL_DIR (the model), ASR_MODE, ASR_MAX_BATCH."""
    model = environ.get("ASR_MODEL_DIR", "").strip()
    if model:
        asr.default_model = model
    mode = environ.get("ASR_MODE", "").strip()
    if mode:
        asr.mode = parse_mode(mode)
    max_batch = environ.get("ASR_MAX_BATCH", "").strip()
    if max_batch:
        if not max_batch.isdigit() or int(max_batch) < 1:
            raise ValueError(f"ASR_MAX_BATCH must be an integer >= 1, got {max_batch!r}")
        asr.max_batch = int(max_batch)
