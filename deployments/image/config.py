"""Configuration of the image slot (the `image:` block of the graph args)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from deployments.image.tiny_model import TINY_IMAGE_ID
from deployments.slot_types import SLOT_DEFAULT, SlotModelsConfig

# OminiX-API's names for its two image models, as mflux knows them on the Hugging Face hub.
DEFAULT_ALIASES = {
    "flux": "black-forest-labs/FLUX.2-klein-4B",
    "zimage": "Tongyi-MAI/Z-Image-Turbo",
    # OpenAI's model names: the slot's default.
    "dall-e-2": SLOT_DEFAULT,
    "dall-e-3": SLOT_DEFAULT,
    "gpt-image-1": SLOT_DEFAULT,
}


class ImageSlotConfig(SlotModelsConfig):
    default_model: str = Field(TINY_IMAGE_ID, description="Served when a request names no model; loaded at start-up")
    aliases: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_ALIASES),
        description=(
            "OminiX-API's `flux`, `zimage` -> their models when allowed here, else the default model "
            "(`default`: always the slot's default)"
        ),
    )
    # models_dir (SlotModelsConfig): POST /v1/models/quantize writes its copies there too
    # (default <cache_dir>/image/models). max_models_per_replica stays 1: image models are GBs.

    @model_validator(mode="after")
    def _default_by_alias(self) -> ImageSlotConfig:
        # OminiX-API's IMAGE_MODEL=flux|zimage (or the same in the args) names the model itself.
        target = self.aliases.get(self.default_model.lower())
        if target and target != SLOT_DEFAULT:
            self.default_model = target
        return self

    def max_ongoing_requests(self) -> int:
        # One generation runs at a time per replica (a denoising step uses every core MLX has).
        return 8

    def catalog_entry(self, cache_dir: Path) -> dict:
        # Quantized copies live in the models directory.
        return {**super().catalog_entry(cache_dir), "models_dir": str(self.models_root(cache_dir))}

    def models_root(self, cache_dir: Path) -> Path:
        """Where local image models may live, quantized copies included."""
        return Path(self.models_dir).expanduser() if self.models_dir else Path(cache_dir) / "image" / "models"
