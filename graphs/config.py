"""The graph's arguments (`applications[].args` in serve_config.yaml), validated.

OminiX-API's environment variable names override the args, so an OminiX user can switch
without relearning: LLM_MODEL sets the LLM slot's default model. The HTTP port is Ray Serve's
`http_options.port` in serve_config.yaml.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.cuda_proxy.config import CudaArgs, CudaConfigError, CudaRoute, check_no_collision
from deployments.ingress.config import IngressSettings, hash_key
from deployments.asr.config import ASRSlotConfig, parse_mode
from deployments.control.policy import SlotModelsConfig
from deployments.hub import default_cache_dir
from deployments.image.config import ImageSlotConfig
from deployments.llm.config import LLMSlotConfig
from deployments.tts.config import TTSSlotConfig

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# The ingress's chat timeout stays this much above the CUDA route's, so the route times out first.
CUDA_TIMEOUT_MARGIN_S = 10


class SecurityArgs(BaseModel):
    """Who may call the server. Prefer OMINIX_API_KEY to `api_keys`: Ray logs application args."""

    model_config = ConfigDict(extra="forbid")

    api_keys: list[str] = Field(default_factory=list, repr=False)
    cors_origins: list[str] = Field(default_factory=list)
    max_concurrent_requests: int = Field(24, ge=1, description="In flight per ingress replica; above: 429")
    allow_unauthenticated_network_access: bool = Field(
        False, description="Serve on a non-loopback address without API keys (a deliberate decision)"
    )


class InsecureBind(ValueError):
    """Refusing to serve without keys on a non-loopback address."""


class GraphArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cache_dir: Optional[str] = Field(
        None, description="Where built-in models are generated (default ~/.cache/ominix-serve)"
    )
    check_models: bool = Field(
        True, description="Fail start-up when a configured model is neither local nor reachable"
    )
    security: SecurityArgs = Field(default_factory=SecurityArgs)
    llm: LLMSlotConfig = Field(default_factory=LLMSlotConfig)
    cuda: CudaArgs = Field(
        default_factory=CudaArgs, description="Remote-CUDA route (the OMINIX_V0_* settings)"
    )
    asr: ASRSlotConfig = Field(default_factory=ASRSlotConfig)
    tts: TTSSlotConfig = Field(default_factory=TTSSlotConfig)
    image: ImageSlotConfig = Field(default_factory=ImageSlotConfig)
    manifest: Optional[str] = Field(
        None, description="App manifest (ominix.toml) checked at start-up (env OMINIX_APP_MANIFEST)"
    )

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
        _apply_tts_env(config.tts, environ)
        image_model = environ.get("IMAGE_MODEL", "").strip()
        if image_model:  # OminiX-API's IMAGE_MODEL=flux|zimage, or a repo id / directory
            config.image.default_model = config.image.resolve_alias(image_model)
        cache_dir = environ.get("OMINIX_CACHE_DIR", "").strip()
        if cache_dir:
            config.cache_dir = cache_dir
        sec = config.security
        keys = [k.strip() for k in environ.get("OMINIX_API_KEY", "").split(",") if k.strip()]
        sec.api_keys = list(dict.fromkeys([*sec.api_keys, *keys]))
        origins = [o.strip() for o in environ.get("OMINIX_CORS_ORIGINS", "").split(",") if o.strip()]
        sec.cors_origins = origins or sec.cors_origins
        if environ.get("OMINIX_MAX_CONNS", "").strip():
            sec.max_concurrent_requests = int(environ["OMINIX_MAX_CONNS"])
        if environ.get("OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS", "").strip().lower() in ("1", "true", "yes"):
            sec.allow_unauthenticated_network_access = True
        config.cuda = config.cuda.with_env(environ)
        config.manifest = environ.get("OMINIX_APP_MANIFEST", "").strip() or config.manifest
        return config

    def cuda_route(self) -> Optional[CudaRoute]:
        """The validated CUDA route, or None when none of its settings is present."""
        route = self.cuda.route()
        if route is not None and self.llm.enabled:
            check_no_collision(route, self.llm.allowed_models())
        return route

    def ingress_settings(self, bind_host: Optional[str]) -> IngressSettings:
        """What the ingress enforces; refuses a keyless non-loopback bind unless allowed."""
        sec = self.security
        loopback = bind_host is None or bind_host in LOOPBACK_HOSTS
        if not sec.api_keys and not loopback and not sec.allow_unauthenticated_network_access:
            raise InsecureBind(
                f"Refusing to serve on {bind_host} without an API key: set OMINIX_API_KEY, or bind "
                "http_options.host to 127.0.0.1, or set security.allow_unauthenticated_network_access "
                "(OMINIX_ALLOW_UNAUTHENTICATED_NETWORK_ACCESS=1) if that is really what you want."
            )
        cuda_route = self.cuda_route()
        if sec.cors_origins:
            cors = sec.cors_origins
        else:  # a browser page may call a keyless loopback server, nothing else by default
            cors = ["*"] if (loopback and not sec.api_keys and cuda_route is None) else []
        settings = IngressSettings(
            api_key_hashes=[hash_key(k) for k in sec.api_keys],
            cors_origins=cors,
            max_concurrent_requests=sec.max_concurrent_requests,
        )
        return settings if cuda_route is None else _with_cuda_route(settings, cuda_route)

    def catalog(self) -> dict[str, dict]:
        """slot -> its allowed model ids (default first) and models directory, for the ingress."""
        slots = {
            slot: {"models": config.allowed_models(), "models_dir": config.models_dir}
            for slot, config in self.slots().items()
        }
        if "image" in slots:  # quantized copies live in its models directory; OminiX-API's aliases
            slots["image"]["models_dir"] = str(self.image.models_root(self.resolved_cache_dir()))
            slots["image"]["aliases"] = {k.lower(): v for k, v in self.image.aliases.items()}
        return slots

    def resolved_cache_dir(self):
        return Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir()

    def defaults(self) -> dict[str, str]:
        """slot -> its configured default model: where the control plane starts each slot."""
        return {slot: config.default_model for slot, config in self.slots().items()}

    def slots(self) -> dict[str, SlotModelsConfig]:
        """The enabled model slots by name (llm, asr, tts, image)."""
        candidates = {"llm": self.llm, "asr": self.asr, "tts": self.tts, "image": self.image}
        return {slot: config for slot, config in candidates.items() if config.enabled}


def _with_cuda_route(settings: IngressSettings, route: CudaRoute) -> IngressSettings:
    """A CUDA route spends remote GPU time on every request: no wildcard CORS (a web page must
    not be able to spend it through a loopback server), and chat may run as long as the
    route's own timeout, which answers first with its own 504 and aborts the worker request."""
    if "*" in settings.cors_origins:
        raise CudaConfigError(
            "security.cors_origins must list exact origins when an OminiX-SGLang route is "
            "configured: wildcard CORS would let any web page spend CUDA time"
        )
    settings = settings.model_copy(deep=True)
    for policy in settings.routes:
        if policy.prefix == "/v1/chat/completions" and policy.timeout_s is not None:
            policy.timeout_s = max(policy.timeout_s, route.timeout_s + CUDA_TIMEOUT_MARGIN_S)
    return settings


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
