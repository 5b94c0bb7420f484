"""Loading mflux pipelines: the MLX side of choosing a family, its ModelConfig and class.

Imported on the engine thread (importing mflux imports MLX). A model directory that carries a
config.json with a `family` (the built-in tiny model, quantized copies this server wrote) says
how to build it; any other model is recognised by name, as mflux and OminiX-API do.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Optional

import mlx.core as mx

from deployments.accelerator import on_cpu_backend
from deployments.hub import build_model_dir
from deployments.image.families import FLUX2_KLEIN, Z_IMAGE_TURBO, ImageFamily, family_of

# mflux mx.compile()s the denoiser. On MLX's CPU backend the first compile of a graph costs
# more than a small generation itself and the compiled graph buys little, so compile is off
# there (what MLX_DISABLE_COMPILE=1 does, but effective although MLX is already imported).
# On a GPU (Metal, or CUDA with MLX's CUDA build) compile pays off: the gate is the CPU
# backend, not "no Metal". MLX_DISABLE_COMPILE still works as an override everywhere.
if on_cpu_backend():
    mx.disable_compile()


def _base_config(family: ImageFamily, base_model: Optional[str] = None):
    from mflux.models.common.config.model_config import ModelConfig

    if base_model:
        try:
            return ModelConfig.from_name(base_model)
        except Exception:
            pass
    return ModelConfig.flux2_klein_4b() if family is FLUX2_KLEIN else ModelConfig.z_image_turbo()


def tiny_model_config(
    transformer_overrides: dict,
    text_encoder_overrides: dict,
    family: ImageFamily = FLUX2_KLEIN,
    base_model: Optional[str] = None,
):
    """A family's ModelConfig with other sizes (a copy: mflux caches its configs)."""
    config = copy.copy(_base_config(family, base_model))
    config.transformer_overrides = dict(transformer_overrides)
    config.text_encoder_overrides = dict(text_encoder_overrides)
    return config


def describe(model_id: str, model_dir: Path) -> tuple[ImageFamily, Any]:
    """(family, mflux ModelConfig) for a model directory."""
    from mflux.models.common.config.model_config import ModelConfig

    declared = read_declared(model_dir)
    if declared is not None:
        family = family_of(model_id, declared["family"])
        config = tiny_model_config(
            declared.get("transformer_overrides", {}),
            declared.get("text_encoder_overrides", {}),
            family,
            declared.get("base_model"),
        )
        return family, config
    try:
        config = ModelConfig.from_name(model_id)
    except Exception:  # a local path or an id mflux does not know: OminiX-API's name rule
        family = family_of(model_id)
        return family, _base_config(family)
    family = Z_IMAGE_TURBO if "z-image" in (config.model_name or "").lower() else FLUX2_KLEIN
    return family, config


def load_pipeline(model_id: str, model_dir: Path, quantize: Optional[int] = None):
    """(family, pipeline) for a model directory; `quantize` bits quantizes while loading."""
    family, config = describe(model_id, model_dir)
    if family is Z_IMAGE_TURBO:
        from mflux.models.z_image.variants.z_image import ZImage as cls
    else:
        from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein as cls
    return family, cls(model_path=str(model_dir), model_config=config, quantize=quantize)


def write_quantized(model_id: str, model_dir: Path, bits: int, target: Path) -> Path:
    """An mflux-quantized copy of a model (mflux's quantize-on-load, then its save_model),
    written atomically to `target` with a config.json that says how to load it."""

    def write(work: Path) -> None:
        family, pipeline = load_pipeline(model_id, model_dir, quantize=bits)
        pipeline.save_model(str(work))
        declared = read_declared(model_dir) or {}
        config = {
            "family": family.name,
            "base_model": declared.get("base_model", model_id),
            "transformer_overrides": pipeline.model_config.transformer_overrides,
            "text_encoder_overrides": pipeline.model_config.text_encoder_overrides,
            "quantized_bits": bits,
        }
        (work / "config.json").write_text(json.dumps(config, indent=2))

    return build_model_dir(target, write, f"a {bits}-bit copy of {model_id}")


def read_declared(model_dir: Path) -> Optional[dict]:
    """The model directory's own description (see the module docstring), if it has one."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "family" in data else None
