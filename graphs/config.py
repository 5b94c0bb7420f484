"""The graph's arguments (`applications[].args` in serve_config.yaml), validated.

OminiX-API's environment variable names override the args, so an OminiX user can switch
without relearning: LLM_MODEL sets the LLM slot's default model. The HTTP port is Ray Serve's
`http_options.port` in serve_config.yaml.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.cuda_proxy.config import CudaArgs, CudaRoute, check_no_collision
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
    cuda: CudaArgs = Field(
        default_factory=CudaArgs, description="Remote-CUDA route (the OMINIX_V0_* settings)"
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
        cache_dir = environ.get("OMINIX_CACHE_DIR", "").strip()
        if cache_dir:
            config.cache_dir = cache_dir
        config.cuda = config.cuda.with_env(environ)
        return config

    def cuda_route(self) -> Optional[CudaRoute]:
        """The validated CUDA route, or None when none of its settings is present."""
        route = self.cuda.route()
        if route is not None and self.llm.enabled:
            check_no_collision(route, self.llm.allowed_models())
        return route

    def catalog(self) -> dict[str, list[str]]:
        """slot -> allowed model ids (default first), for the ingress."""
        slots = {}
        if self.llm.enabled:
            slots["llm"] = self.llm.allowed_models()
        return slots
