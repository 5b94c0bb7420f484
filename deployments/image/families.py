"""Which mflux pipeline serves a model id, and what that pipeline accepts.

OminiX-API picks the family by case-insensitive substring of the model name: `zimage` /
`z-image` is Z-Image-Turbo, anything else FLUX.2-klein. We keep that rule for ids mflux does not
know by name. No Ray, no MLX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ImageFamily:
    name: str
    default_steps: int  # OminiX-API: FLUX 4, Z-Image 9
    default_guidance: Optional[float]  # None: the pipeline's own choice
    negative_prompt: bool  # whether the pipeline takes a negative prompt
    guidance: bool  # whether the pipeline uses guidance at all (distilled turbo models do not)


FLUX2_KLEIN = ImageFamily("flux2-klein", default_steps=4, default_guidance=1.0, negative_prompt=False, guidance=True)
Z_IMAGE_TURBO = ImageFamily(
    "z-image-turbo", default_steps=9, default_guidance=None, negative_prompt=True, guidance=False
)
FAMILIES = {f.name: f for f in (FLUX2_KLEIN, Z_IMAGE_TURBO)}


def family_of(model_id: str, declared: Optional[str] = None) -> ImageFamily:
    """The family a model directory declares (built-in models), else OminiX-API's name rule."""
    if declared:
        if declared not in FAMILIES:
            raise ValueError(f"Unknown image model family {declared!r}; known: {', '.join(FAMILIES)}")
        return FAMILIES[declared]
    name = model_id.lower()
    if "zimage" in name or "z-image" in name or "z_image" in name:
        return Z_IMAGE_TURBO
    return FLUX2_KLEIN


def img2img_keep(strength: float) -> float:
    """OpenAI/OminiX `strength` (1 = repaint everything) -> mflux's image_strength (the share
    of the denoising schedule that is skipped, i.e. how much of the image is kept)."""
    return 1.0 - strength
