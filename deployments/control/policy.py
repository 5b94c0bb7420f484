"""Which models an operator or a request may load into a slot.

Allowed: the ids listed in the slot's config, and local paths inside the slot's configured
models directory. Anything else is refused (403) before a replica touches the disk or the hub;
a path that tries to climb out (`..`, an absolute path elsewhere) is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.protocol.errors import APIError


class SlotModelsConfig(BaseModel):
    """The model fields every slot's config block shares: its default and its allow-list."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="False: the slot is not bound and its routes answer 404 slot_disabled")
    default_model: str = Field(..., description="Served when a request names no model; loaded at start-up")
    models: list[str] = Field(default_factory=list, description="Other model ids requests may name (the allow-list)")
    models_dir: Optional[str] = Field(None, description="Local model directories under this path may be loaded too")
    max_models_per_replica: int = Field(
        1, ge=1, description="Models one replica keeps loaded at once (the least recently used is evicted)"
    )

    def allowed_models(self) -> list[str]:
        return list(dict.fromkeys([self.default_model, *self.models]))

    def max_ongoing_requests(self) -> int:
        """Requests Serve sends one replica at once; more wait in Serve's queue, where the
        autoscaler sees them. Each slot derives it from its own settings (graphs/omni.py)."""
        raise NotImplementedError

    def catalog_entry(self, cache_dir: Path) -> dict:
        """What the ingress's model catalog needs of this slot (deployments/ingress/catalog.py)."""
        return {"models": self.allowed_models(), "models_dir": self.models_dir}


def check_model_allowed(model: str, allowed_ids: Sequence[str], models_dir: Optional[str], slot: str) -> None:
    if model in allowed_ids:
        return
    if ".." in Path(model).parts or "\x00" in model:
        raise APIError(400, "Model path contains invalid directory traversal", "invalid_request_error", "model")
    if models_dir and _is_inside(model, models_dir):
        return
    if Path(model).is_absolute() or model.startswith("~"):
        raise APIError(
            400, f"Model path '{model}' is outside the allowed models directory", "invalid_request_error", "model"
        )
    raise APIError(
        403,
        f"Model '{model}' is not allowed for slot '{slot}' by server configuration",
        "forbidden",
        "model",
        "model_not_allowed",
    )


def _is_inside(model: str, models_dir: str) -> bool:
    root = Path(models_dir).expanduser().resolve()
    candidate = Path(model).expanduser()
    candidate = (candidate if candidate.is_absolute() else root / candidate).resolve()
    return candidate.is_relative_to(root) and candidate.is_dir()
