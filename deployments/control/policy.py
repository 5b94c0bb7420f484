"""Which models an operator or a request may load into a slot.

Allowed: the ids listed in the slot's config, and local paths inside the slot's configured
models directory. Anything else is refused (403) before a replica touches the disk or the hub;
a path that tries to climb out (`..`, an absolute path elsewhere) is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from deployments.protocol.errors import APIError

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

    def catalog_entry(self, cache_dir: Path) -> dict:
        """What the ingress's model catalog needs of this slot (deployments/ingress/catalog.py)."""
        return {
            "models": self.allowed_models(),
            "models_dir": self.models_dir,
            "aliases": dict(self.aliases),
            "families": self.family_models(),
        }


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
