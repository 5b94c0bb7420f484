"""The LoRA adapters an LLM replica may serve, and each one it holds.

An adapter is served as a model of its own: a request's `model` names it, and the ingress sets
that name as the request's Serve multiplexed model id, so Serve routes it to replicas that hold
the adapter (deployments/control/replica_models.py keeps adapters as residents of the replica's
multiplexer, `llm.max_adapters_per_replica` of them, least recently used evicted). Which names
are adapters, and where their files are and which model they run on (`AdapterSpec`), comes from
the slot's config (`llm.adapters`) and from Control, which keeps those an operator loads at run
time (POST /v1/load_lora_adapter) for every replica (`AdapterSpecs`).

A held adapter (`HeldAdapter`) is its load into the engine of its model: the request's
generation names it (deployments/llm/engine.py), and evicting it unloads it from the engine
between two steps, once its running rows are done (deployments/llm/lora.py).

No Ray, no MLX.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from deployments.llm.lora import AdapterRef


@dataclass(frozen=True)
class AdapterSpec:
    """An adapter as configured or loaded: its name, its files (a local directory or a Hugging
    Face repo id) and the model it runs on (None: the slot's default model)."""

    name: str
    path: str
    base: Optional[str] = None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "base": self.base}

    @classmethod
    def of(cls, name: str, raw: Any) -> AdapterSpec:
        """From the config's or Control's form: a path, or {"path", "base"}."""
        if isinstance(raw, str):
            return cls(name, raw)
        return cls(name, raw["path"], raw.get("base"))


class AdapterSpecs:
    """The adapters a replica may serve: the configured ones, then those loaded at run time."""

    def __init__(self, configured: Mapping[str, Any]):
        self.configured = {name: AdapterSpec.of(name, raw) for name, raw in configured.items()}
        self.runtime: dict[str, AdapterSpec] = {}

    def get(self, name: str) -> Optional[AdapterSpec]:
        return self.runtime.get(name) or self.configured.get(name)

    def replace_runtime(self, raw: Mapping[str, Any]) -> list[str]:
        """Control's run-time adapters now; the names whose spec went or changed (a replica
        evicts what it holds of them)."""
        new = {name: AdapterSpec.of(name, spec) for name, spec in raw.items()}
        changed = [n for n, s in self.runtime.items() if new.get(n) != s]
        self.runtime = new
        return changed


class HeldAdapter:
    """An adapter held by a replica's multiplexer: its load into the engine it runs on."""

    def __init__(self, engine: Any, ref: AdapterRef, base: str):
        self.engine = engine
        self.ref = ref
        self.base = base
        self.model_id = ref.name  # the multiplexed id it is held under
        self.stats: dict[str, Any] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self.engine.closed

    def shutdown(self) -> None:
        """Unload it from its engine (between two steps; its running rows finish first)."""
        if not self._closed:
            self._closed = True
            self.engine.remove_adapter(self.ref)

    def check_health(self) -> None:
        """Its engine's health is checked as the engine's own."""

    def pending(self) -> int:
        return 0

    def __del__(self):  # Serve's multiplexer calls this when it evicts a resident
        self.shutdown()
