"""What a model slot is, as data: the types every slot's entry (`<slot>/slot.py`) and config
are made of, at the bottom of the import graph (docs/architecture.md, "Layers").

A `Slot` says everything the rest of the project needs to know about one slot: its name in the
graph args, the Serve deployment that runs it, its config model, its built-in models, the routes
it serves (with their body caps and timeouts), the model types it serves, and the engine package
behind it. `SlotModelsConfig` holds the model fields every slot's config block shares.

This module imports no slot, no Ray and no MLX: the deployment class is named by import path
and loaded only by the graph builder.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deployments.resources import reserve

# A built-in model: its id -> the function that generates or converts it into a cache dir.
Builtins = dict[str, Callable[..., Any]]

SERVE_DRAIN_DEFAULT_S = 20.0  # Serve's graceful_shutdown_timeout_s

# An alias target meaning "whatever the slot serves by default" (its default model at the time).
SLOT_DEFAULT = "default"


class SlotModelsConfig(BaseModel):
    """The model fields every slot's config block shares: its default and its allow-list."""

    model_config = ConfigDict(extra="forbid")

    # OminiX-API's model families with a route of their own (/v1/audio/tts/qwen3, ...): family ->
    # a pattern its model ids match (case-insensitive), e.g. "Qwen3-TTS" in a Hugging Face repo id.
    families: ClassVar[dict[str, str]] = {}

    enabled: bool = Field(True, description="False: the slot is not bound and its routes answer 404 slot_disabled")
    default_model: str = Field(..., description="Served when a request names no model; loaded at start-up")
    models: list[str] = Field(default_factory=list, description="Other model ids requests may name (the allow-list)")
    models_dir: Optional[str] = Field(None, description="Local model directories under this path may be loaded too")
    max_models_per_replica: int = Field(
        1, ge=1, description="Models one replica keeps loaded at once (the least recently used is evicted)"
    )
    # Ollama unloads a model 5 minutes after its last request (its keep_alive default), LM
    # Studio after an hour: 300 s frees a model a client tried and left, while a model in use,
    # and the default (keep_default_loaded), stay. deployments/control/idle.py decides.
    idle_unload_s: Optional[float] = Field(
        300.0,
        ge=0,
        description=(
            "A model that served nothing for this long is unloaded on every replica that holds it "
            "(0 or null: never); a request's `keep_alive` overrides it for its model"
        ),
    )
    keep_default_loaded: bool = Field(
        True, description="The slot's default model is never unloaded for being idle (nor by a request's keep_alive)"
    )
    aliases: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Other names requests may use as `model` (OminiX-API's family names), each -> an allowed model id "
            "or `default` (the slot's default model); a target that is not allowed means the default too"
        ),
    )

    @field_validator("aliases")
    @classmethod
    def _lower_case_aliases(cls, aliases: dict[str, str]) -> dict[str, str]:
        # Matched case-insensitively, as OminiX-API matches its family names.
        return {name.strip().lower(): target.strip() for name, target in aliases.items()}

    def allowed_models(self) -> list[str]:
        return list(dict.fromkeys([self.default_model, *self.models]))

    def family_models(self) -> dict[str, list[str]]:
        """family -> the allowed models of it: its alias's explicit target, then the ids that
        match the family's pattern. The slot's default counts only when it is of the family."""
        allowed = self.allowed_models()
        return {
            family: list(
                dict.fromkeys(
                    [
                        *([self.aliases[family]] if self.aliases.get(family) in allowed else []),
                        *(m for m in allowed if re.search(pattern, m, re.IGNORECASE)),
                    ]
                )
            )
            for family, pattern in self.families.items()
        }

    def max_ongoing_requests(self) -> int:
        """Requests Serve sends one replica at once; more wait in Serve's queue, where the
        autoscaler sees them. Each slot derives it from its own settings (graphs/omni.py)."""
        raise NotImplementedError

    def placement_options(self, replica_resources: dict) -> dict:
        """Serve options that place a replica as more than one actor (a placement group per
        replica: graphs/omni.py); {} for a replica that is one actor."""
        return {}

    def catalog_entry(self, cache_dir: Path) -> dict:
        """What the ingress's model catalog needs of this slot (deployments/ingress/catalog.py)."""
        return {
            "models": self.allowed_models(),
            "models_dir": self.models_dir,
            "aliases": dict(self.aliases),
            "families": self.family_models(),
        }


@dataclass(frozen=True)
class Engine:
    """The Python package that serves a slot, as /v1/version and app manifests see it."""

    name: str
    package: str  # the distribution whose installed version is the engine's version
    description: str
    capabilities: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    """A public route prefix of a slot, with what the ingress allows a request on it."""

    prefix: str
    max_body_bytes: int
    timeout_s: Optional[float]
    card: bool = True  # listed among the slot's endpoints in /v1/models


@dataclass(frozen=True)
class Slot:
    name: str  # the args block, the catalog's model_type, Control's and /metrics' key
    deployment_name: str  # the Serve deployment (serve_config.yaml `deployments:`, serve status)
    deployment: str  # "module:Class" of the deployment, imported only by the graph builder
    config: type[SlotModelsConfig]
    builtins: Builtins
    routes: tuple[Route, ...]
    engine: Engine
    # What one replica reserves from Ray: a small logical CPU share and memory sized from its
    # measured peak (docs/resources.md); serve_config.yaml repeats it, a unit test keeps them equal.
    replica_resources: dict = field(default_factory=lambda: reserve(0.1, 512))
    real_model_hint: str = ""  # shown when a built-in random-weight model serves
    random_builtins: frozenset[str] = field(default_factory=frozenset)
    repo_root_file: str = "config.json"  # every Hugging Face repo of the slot's format has it
    # The models on disk that are this slot's (GET /v1/models/report): config.json's `model_type`
    # values it serves, and subdirectories that mark its models when there is no config.json.
    model_types: frozenset[str] = field(default_factory=frozenset)
    model_dirs: tuple[str, ...] = ()
    other_model_types: bool = False  # a model whose type no slot lists is this slot's
    # System programs its replicas run (deployments/system_deps.py): one that is missing is a
    # WARNING at start and a line in /v1/version and /readyz, never a silent degradation.
    system_tools: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How messages name the slot: "LLM", "ASR", "TTS", "Image"."""
        return self.deployment_name

    def endpoints(self) -> list[str]:
        return [route.prefix for route in self.routes if route.card]

    def drain_timeout_s(self) -> float:
        """How long a replica that Serve stops (a scale-down, a redeploy) may finish the requests
        it holds: as long as the slot's longest route lets a request run. Serve's default, 20 s,
        cut syntheses and generations off mid-answer when the autoscaler chose a busy replica.
        WebSocket routes (no timeout) do not count: a socket outlives any one replica."""
        return max([SERVE_DRAIN_DEFAULT_S] + [r.timeout_s for r in self.routes if r.timeout_s is not None])

    def deployment_class(self) -> Any:
        module, _, name = self.deployment.partition(":")
        return getattr(importlib.import_module(module), name)
