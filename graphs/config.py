"""The graph's arguments (`applications[].args` in serve_config.yaml), validated.

OminiX-API's environment variable names override the args, so an OminiX user can switch
without relearning: LLM_MODEL sets the LLM slot's default model (the table and its one rule:
deployments/env.py). The HTTP port is Ray Serve's `http_options.port` in serve_config.yaml.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from deployments import env
from deployments.cuda_proxy.config import CudaArgs, CudaConfigError, CudaRoute, check_no_collision
from deployments.env import ConfigError
from deployments.hub import default_cache_dir
from deployments.ingress.config import IngressSettings, hash_key
from deployments.slot_types import SlotModelsConfig
from deployments.slots import SLOTS

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# The ingress's chat timeout stays this much above the CUDA route's, so the route times out first.
CUDA_TIMEOUT_MARGIN_S = 10


class SecurityArgs(BaseModel):
    """Who may call the server. Prefer OMINIX_API_KEY to `api_keys`: Ray logs application args."""

    model_config = ConfigDict(extra="forbid")

    api_keys: list[str] = Field(default_factory=list, repr=False, description="Bearer keys a client must send")
    cors_origins: list[str] = Field(
        default_factory=list, description="Browser origins allowed; default: * for a keyless loopback server, else none"
    )
    max_concurrent_requests: int = Field(24, ge=1, description="In flight per ingress replica; above: 429")
    allow_unauthenticated_network_access: bool = Field(
        False, description="Serve on a non-loopback address without API keys (a deliberate decision)"
    )


class InsecureBind(ValueError):
    """Refusing to serve without keys on a non-loopback address."""


class LoggingArgs(BaseModel):
    """What the graph's deployments log: Ray Serve's per-deployment `logging_config`, set only
    where this block says something, so serve_config.yaml's application `logging_config`
    (encoding, logs_dir) still reaches the others (Serve applies it to a deployment whose code
    set none: ray/serve/_private/application_state.py)."""

    model_config = ConfigDict(extra="forbid")

    level: Optional[Literal["DEBUG", "INFO", "WARNING", "ERROR"]] = Field(
        None, description="Log level of every deployment (LOG_LEVEL); unset: Serve's, INFO"
    )
    control_access_log: Optional[bool] = Field(
        None,
        description=(
            "Control's access log: a line per call (`CALL watch OK 5003ms`), about 100 a minute from the "
            "replicas following it; unset: on at level DEBUG only"
        ),
    )

    @field_validator("level", mode="before")
    @classmethod
    def _upper_case(cls, level: Any) -> Any:
        return level.strip().upper() if isinstance(level, str) else level

    def serve_logging_config(self, deployment: str) -> Optional[dict[str, Any]]:
        """The `logging_config` option of one deployment, or None to leave Serve's own."""
        config: dict[str, Any] = {"log_level": self.level} if self.level else {}
        if deployment == "Control":
            access = self.level == "DEBUG" if self.control_access_log is None else self.control_access_log
            config["enable_access_log"] = access
        return config or None


class GraphArgsBase(BaseModel):
    """The args every graph has; `GraphArgs` adds one block per slot of the registry."""

    model_config = ConfigDict(extra="forbid")

    cache_dir: Optional[str] = Field(
        None, description="Where built-in models are generated (default ~/.cache/ominix-serve)"
    )
    check_models: bool = Field(True, description="Fail start-up when a configured model is neither local nor reachable")
    security: SecurityArgs = Field(default_factory=SecurityArgs)
    cuda: CudaArgs = Field(default_factory=CudaArgs, description="Remote-CUDA route (the OMINIX_V0_* settings)")
    manifest: Optional[str] = Field(None, description="App manifest (ominix.toml) checked at start-up")
    logging: LoggingArgs = Field(
        default_factory=LoggingArgs, description="What the deployments log (docs/operating.md)"
    )

    def serve_options(self, deployment: str) -> dict[str, Any]:
        """Serve options every deployment gets from the common args: its logging."""
        logging_config = self.logging.serve_logging_config(deployment)
        return {"logging_config": logging_config} if logging_config else {}

    @classmethod
    def from_args(cls, args: Mapping[str, Any] | None, environ: Mapping[str, str] = os.environ) -> GraphArgsBase:
        """The args with the environment's overrides applied (deployments/env.py: one rule)."""
        targets = env.overrides(environ)
        try:
            return cls.model_validate(env.apply(args or {}, targets))
        except ValidationError as e:
            for error in e.errors():
                var = env.variable_for(error["loc"], targets)
                if var is not None:  # name the variable, never echo its value (keys, tokens)
                    raise ConfigError(f"{var.name}: {error['msg']}") from None
            raise

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
            state_dir=str(self.resolved_cache_dir() / "ingress"),
        )
        return settings if cuda_route is None else _with_cuda_route(settings, cuda_route)

    def catalog(self) -> dict[str, dict]:
        """slot -> its allowed model ids (default first), models directory and aliases."""
        cache_dir = self.resolved_cache_dir()
        return {name: config.catalog_entry(cache_dir) for name, config in self.slots().items()}

    def resolved_cache_dir(self):
        return Path(self.cache_dir).expanduser() if self.cache_dir else default_cache_dir()

    def defaults(self) -> dict[str, str]:
        """slot -> its configured default model: where the control plane starts each slot."""
        return {slot: config.default_model for slot, config in self.slots().items()}

    def slots(self) -> dict[str, SlotModelsConfig]:
        """The enabled model slots by name, in registry order."""
        return {name: getattr(self, name) for name in SLOTS if getattr(self, name).enabled}


GraphArgs = create_model(
    "GraphArgs",
    __base__=GraphArgsBase,
    __doc__="The graph's args: the common blocks plus one block per slot (deployments/slots.py).",
    **{
        name: (slot.config, Field(default_factory=slot.config, description=f"The {slot.label} slot"))
        for name, slot in SLOTS.items()
    },
)


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
