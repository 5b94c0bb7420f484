"""The image slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.image.config import ImageSlotConfig
from deployments.image.tiny_model import TINY_IMAGE_ID, ensure_tiny_image
from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot

SLOT = Slot(
    name="image",
    deployment_name="Image",
    deployment="deployments.image.deployment:ImageSlot",
    config=ImageSlotConfig,
    builtins={TINY_IMAGE_ID: ensure_tiny_image},
    random_builtins=frozenset({TINY_IMAGE_ID}),
    real_model_hint="IMAGE_MODEL=flux (on a Mac)",
    repo_root_file="model_index.json",  # diffusers layout (FLUX.2-klein, Z-Image)
    replica_resources=reserve(0.1, 2048),
    routes=(
        Route("/v1/images/generations", 10 * MiB, 600.0),
        Route("/v1/images/", 10 * MiB, 600.0, card=False),
        # Loads and rewrites a whole image model.
        Route("/v1/models/quantize", 64 * 1024, 600.0, card=False),
    ),
    model_types=frozenset({"flux", "flux2", "zimage", "qwen_image"}),
    model_dirs=("transformer",),  # diffusers repos have no config.json at their root
    engine=Engine(
        "mflux",
        "mflux",
        "Image generation (FLUX.2-klein via mflux)",
        ("text_to_image", "image_to_image", "quantization"),
    ),
)
