"""Configuration of the image slot (the `image:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from deployments.image.tiny_model import TINY_IMAGE_ID

# OminiX-API's names for its two image models, as mflux knows them on the Hugging Face hub.
DEFAULT_ALIASES = {
    "flux": "black-forest-labs/FLUX.2-klein-4B",
    "zimage": "Tongyi-MAI/Z-Image-Turbo",
}


class ImageSlotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    default_model: str = Field(TINY_IMAGE_ID, description="Served when a request names no model; loaded at start-up")
    models: list[str] = Field(default_factory=list, description="Other model ids requests may name (the allow-list)")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ALIASES),
        description="Short names requests may use (OminiX-API's `flux`, `zimage`); a target must be allowed",
    )
    models_dir: Optional[str] = Field(
        None,
        description="Local model directories under this path may be loaded too; POST /v1/models/quantize "
        "writes its copies here (default <cache_dir>/image/models)",
    )
    max_models_per_replica: int = Field(1, ge=1, description="Image models are large: one per replica by default")

    def resolve_alias(self, model: str) -> str:
        return self.aliases.get(model.lower(), model) if model else model

    def models_root(self, cache_dir: Path) -> Path:
        """Where local image models may live, quantized copies included."""
        return Path(self.models_dir).expanduser() if self.models_dir else Path(cache_dir) / "image" / "models"

    def allowed_models(self) -> list[str]:
        return list(dict.fromkeys([self.default_model, *self.models]))
