"""Configuration of the image slot (the `image:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from deployments.control.policy import SlotModelsConfig
from deployments.image.tiny_model import TINY_IMAGE_ID

# OminiX-API's names for its two image models, as mflux knows them on the Hugging Face hub.
DEFAULT_ALIASES = {
    "flux": "black-forest-labs/FLUX.2-klein-4B",
    "zimage": "Tongyi-MAI/Z-Image-Turbo",
}


class ImageSlotConfig(SlotModelsConfig):
    default_model: str = Field(TINY_IMAGE_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ALIASES),
        description="Short names requests may use (OminiX-API's `flux`, `zimage`); a target must be allowed",
    )
    # models_dir (SlotModelsConfig): POST /v1/models/quantize writes its copies there too
    # (default <cache_dir>/image/models). max_models_per_replica stays 1: image models are GBs.

    @model_validator(mode="after")
    def _default_by_alias(self) -> ImageSlotConfig:
        # OminiX-API's IMAGE_MODEL=flux|zimage (or the same in the args) names the model.
        self.default_model = self.resolve_alias(self.default_model)
        return self

    def max_ongoing_requests(self) -> int:
        # One generation runs at a time per replica (a denoising step uses every core MLX has).
        return 8

    def resolve_alias(self, model: str) -> str:
        return self.aliases.get(model.lower(), model) if model else model

    def catalog_entry(self, cache_dir: Path) -> dict:
        # Quantized copies live in the models directory; requests may use OminiX-API's aliases.
        return {
            "models": self.allowed_models(),
            "models_dir": str(self.models_root(cache_dir)),
            "aliases": {k.lower(): v for k, v in self.aliases.items()},
        }

    def models_root(self, cache_dir: Path) -> Path:
        """Where local image models may live, quantized copies included."""
        return Path(self.models_dir).expanduser() if self.models_dir else Path(cache_dir) / "image" / "models"
