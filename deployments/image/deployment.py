"""The image slot as a Ray Serve deployment: a thin adapter from Serve to `ImageEngine`.

`generate` turns checked `ImageParams` into an engine job (seeds, steps, the decoded init
image) and returns the encoded images. Models are chosen per request through Serve model
multiplexing and follow the control plane, as in the LLM slot. `quantize` writes an
mflux-quantized copy of an allowed model (POST /v1/models/quantize).
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from pathlib import Path
from typing import Any, Optional

from ray import serve

from deployments.control.agent import SlotAgent
from deployments.control.policy import check_model_allowed
from deployments.control.replica_models import ReplicaModels
from deployments.hub import default_cache_dir, resolve_model_dir
from deployments.image.codec import BadImage, open_image
from deployments.image.config import ImageSlotConfig
from deployments.image.engine import ImageEngine, ImageJob
from deployments.image.tiny_model import TINY_IMAGE_ID, ensure_tiny_image
from deployments.protocol.errors import invalid_request, unavailable
from deployments.protocol.images import MAX_SEED, GeneratedImages, ImageParams
from deployments.resources import reserve

logger = logging.getLogger("ray.serve")

BUILTIN_IMAGE_MODELS = {TINY_IMAGE_ID: ensure_tiny_image}
# What mflux reads from a Hugging Face repo (FLUX.2-klein, Z-Image: diffusers layout); the
# single-file checkpoint some repos also carry at their root is not needed.
IMAGE_FILE_PATTERNS = [
    "*.json", "*.jinja", "*.txt",
    "vae/*", "transformer/*", "text_encoder/*", "tokenizer/*", "tokenizer/**",
]


@serve.deployment(
    name="Image", max_ongoing_requests=8, health_check_period_s=10, ray_actor_options=reserve(0.1, 2048)
)
class ImageSlot:
    async def __init__(self, config: dict, cache_dir: Optional[str] = None, control=None):
        self.config = ImageSlotConfig.model_validate(config)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.models_root = self.config.models_root(self.cache_dir)
        self.models = ReplicaModels("image", self._load_engine, self.config.max_models_per_replica)
        self.agent = SlotAgent(
            "image", control, load_default=self.models.get, unload_all=self._unload_all,
            loaded_models=self.models.loaded, fallback_default=self.config.default_model,
        )
        await self.agent.start()  # the slot's current default is loaded before we serve

    async def _load_engine(self, model_id: str) -> ImageEngine:
        model_dir = await asyncio.to_thread(self._model_dir, model_id)
        engine = await ImageEngine.start(model_id, model_dir)
        if model_id in BUILTIN_IMAGE_MODELS:
            logger.warning(
                "Image slot serves the built-in tiny model '%s': random weights, the images are "
                "noise. Use a real model (on a Mac) with e.g. IMAGE_MODEL=flux", model_id,
            )
        return engine

    def _model_dir(self, model_id: str) -> Path:
        return resolve_model_dir(
            model_id, builtins=BUILTIN_IMAGE_MODELS, cache_dir=self.cache_dir, allow_patterns=IMAGE_FILE_PATTERNS
        )

    def _check_allowed(self, model_id: str) -> None:
        if model_id != self.agent.default_model:
            check_model_allowed(model_id, self.config.allowed_models(), str(self.models_root), "image")

    async def _engine(self) -> ImageEngine:
        return await self.models.for_request(
            self.agent.default_model, self.config.allowed_models(), str(self.models_root)
        )

    async def _unload_all(self) -> None:
        # An operator's unload must not wait minutes for a generation: stop it at its next step.
        for engine in self.models.engines():
            engine.abort_running()
        await self.models.unload_all()

    # ------------------------------------------------------------------ generation

    async def generate(self, params: ImageParams) -> GeneratedImages:
        engine = await self._engine()
        job = await self._job(engine, params)
        images = await engine.generate(job)
        return GeneratedImages(model=engine.model_id, images=images, seeds=job.seeds, output_format=job.output_format)

    async def _job(self, engine: ImageEngine, params: ImageParams) -> ImageJob:
        first_seed = params.seed if params.seed is not None else random.randint(0, MAX_SEED)
        job = ImageJob(
            prompt=params.prompt, width=params.width, height=params.height,
            seeds=[(first_seed + i) % (MAX_SEED + 1) for i in range(params.n)],
            steps=params.steps or engine.default_steps(), guidance=params.guidance,
            negative_prompt=params.negative_prompt, strength=params.strength,
            output_format=params.output_format, output_compression=params.output_compression,
        )
        engine.check_job(job)
        if params.init_image is not None:
            try:
                job.init_image = await asyncio.to_thread(open_image, params.init_image)
            except BadImage as e:
                raise invalid_request(str(e), "image", "invalid_image") from None
        return job

    # ------------------------------------------------------------------ quantization

    async def quantize(self, model_id: str, bits: int) -> dict[str, Any]:
        """Write an mflux `bits`-bit copy of an allowed model; reused if it exists already."""
        from deployments.image.pipelines import read_declared

        self._check_allowed(model_id)
        model_dir = await asyncio.to_thread(self._model_dir, model_id)
        already = (read_declared(model_dir) or {}).get("quantized_bits")
        if already:
            raise invalid_request(f"Model '{model_id}' is already quantized ({already}-bit)", "model_id")
        target = self.models_root / f"{_safe_name(model_id)}-{bits}bit"
        reused = (target / "config.json").exists()
        t0 = time.perf_counter()
        if not reused:
            # On the engine's thread: quantizing never races a generation for MLX on this replica.
            from deployments.image.pipelines import write_quantized

            engine = await self._engine_for_default()
            await engine.run(lambda _pipeline: write_quantized(model_id, model_dir, bits, target))
        return {
            "model": model_id, "bits": bits, "path": str(target), "reused": reused,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    async def _engine_for_default(self) -> ImageEngine:
        if self.agent.default_model is None:
            raise unavailable("The image slot has no model loaded; load one with POST /v1/models/load")
        return await self.models.get(self.agent.default_model)

    # ------------------------------------------------------------------ facts

    def stats(self) -> dict:
        """Per loaded model: counters, queued requests and the running generation's progress."""
        return {
            e.model_id: {**vars(e.stats), "pending": e.pending(), "in_progress": e.progress(),
                         "family": e.family.name if e.family else None, "bits": e.bits}
            for e in self.models.engines()
        }

    def check_health(self) -> None:
        self.models.check_health()


def _safe_name(model_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model_id.strip("/~.")) or "model"
