"""Configuration of the VLM slot (the `vlm:` block of the graph args), including the image
limits the ingress applies to a vision request before it reaches the slot."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from deployments.slot_types import SlotModelsConfig
from deployments.vlm.images import ImageLimits, MiB
from deployments.vlm.tiny_model import TINY_VLM_ID


class VLMSlotConfig(SlotModelsConfig):
    default_model: str = Field(TINY_VLM_ID, description="Served when a request names no model; loaded at start-up")
    default_max_tokens: int = Field(512, ge=1, description="Tokens generated when a request sets no max_tokens")
    max_images: int = Field(4, ge=1, description="Images one request may carry; more is a 400")
    max_image_mb: float = Field(10.0, gt=0, description="Largest encoded image; larger is a 400")
    max_image_pixels: int = Field(4096 * 4096, ge=1, description="Largest decoded image (width x height)")
    allow_remote_images: bool = Field(
        False, description="Fetch http(s) image URLs server-side (an SSRF risk: off, data URLs only)"
    )
    remote_image_timeout_s: float = Field(10.0, gt=0, le=120, description="Whole fetch of one remote image")
    max_n: int = Field(
        4, ge=1, description="Choices one request may ask for (`n`), generated one after the other; more is a 400"
    )
    max_concurrent_generations: int = Field(
        4, ge=1, description="Requests one replica takes at once (they generate one after another)"
    )

    def max_ongoing_requests(self) -> int:
        # mlx-vlm generates one sequence at a time per model here: a few wait in the replica,
        # the rest in Serve's queue, where the autoscaler sees them.
        return self.max_concurrent_generations

    def image_limits(self) -> ImageLimits:
        return ImageLimits(
            max_images=self.max_images,
            max_image_bytes=int(self.max_image_mb * MiB),
            max_pixels=self.max_image_pixels,
            allow_remote=self.allow_remote_images,
            remote_timeout_s=self.remote_image_timeout_s,
        )

    def catalog_entry(self, cache_dir: Path) -> dict:
        # The ingress loads and checks images before the slot sees a request.
        options = {"image_limits": vars(self.image_limits()), "max_n": self.max_n}
        return {**super().catalog_entry(cache_dir), "options": options}
