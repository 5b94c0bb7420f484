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
from typing import Any

from ray import serve

from deployments.control.policy import check_model_allowed
from deployments.image.codec import BadImage, open_image
from deployments.image.engine import ImageEngine, ImageJob
from deployments.image.metrics import ImageMetrics
from deployments.image.slot import SLOT
from deployments.protocol.errors import invalid_request, unavailable
from deployments.protocol.images import MAX_SEED, GeneratedImages, ImageParams
from deployments.routing.router import ONE_JOB_AT_A_TIME
from deployments.slot_replica import SlotReplica

logger = logging.getLogger("ray.serve")


@serve.deployment(request_router_config=ONE_JOB_AT_A_TIME)
class ImageSlot(SlotReplica):
    slot = SLOT
    # What mflux reads from a Hugging Face repo (FLUX.2-klein, Z-Image: diffusers layout); the
    # single-file checkpoint some repos also carry at their root is not needed.
    file_patterns = [
        "*.json",
        "*.jinja",
        "*.txt",
        "vae/*",
        "transformer/*",
        "text_encoder/*",
        "tokenizer/*",
        "tokenizer/**",
    ]
    metrics_class = ImageMetrics

    async def setup(self) -> None:
        self.models_root = self.config.models_root(self.cache_dir)

    async def start_engine(self, model_id: str, model_dir: Path) -> ImageEngine:
        return await ImageEngine.start(model_id, model_dir)

    def models_dir(self) -> str:
        return str(self.models_root)  # quantized copies live there too

    def engine_summary(self, engine: ImageEngine) -> dict[str, Any]:
        return {
            **vars(engine.stats),
            "pending": engine.pending(),
            "in_progress": engine.progress(),
            "family": engine.family.name if engine.family else None,
            "bits": engine.bits,
        }

    def _check_allowed(self, model_id: str) -> None:
        if model_id != self.agent.default_model:
            check_model_allowed(model_id, self.config.allowed_models(), self.models_dir(), "image")

    async def unload_all(self) -> None:
        # An operator's unload must not wait minutes for a generation: stop it at its next step.
        for engine in self.models.engines():
            engine.abort_running()
        await self.models.unload_all()

    # ------------------------------------------------------------------ generation

    async def generate(self, params: ImageParams) -> GeneratedImages:
        started = time.perf_counter()
        engine = await self.engine()
        job = await self._job(engine, params)
        try:
            images = await engine.generate(job)
        finally:
            self.metrics.generated(engine.model_id, len(job.seeds), job.steps, time.perf_counter() - started)
        return GeneratedImages(model=engine.model_id, images=images, seeds=job.seeds, output_format=job.output_format)

    async def _job(self, engine: ImageEngine, params: ImageParams) -> ImageJob:
        first_seed = params.seed if params.seed is not None else random.randint(0, MAX_SEED)
        job = ImageJob(
            prompt=params.prompt,
            width=params.width,
            height=params.height,
            seeds=[(first_seed + i) % (MAX_SEED + 1) for i in range(params.n)],
            steps=params.steps or engine.default_steps(),
            guidance=params.guidance,
            negative_prompt=params.negative_prompt,
            strength=params.strength,
            output_format=params.output_format,
            output_compression=params.output_compression,
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
        model_dir = await asyncio.to_thread(self.model_dir, model_id)
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
            "model": model_id,
            "bits": bits,
            "path": str(target),
            "reused": reused,
            "seconds": round(time.perf_counter() - t0, 2),
        }

    async def _engine_for_default(self) -> ImageEngine:
        if self.agent.default_model is None:
            raise unavailable("The image slot has no model loaded; load one with POST /v1/models/load")
        return await self.models.use(self.agent.default_model)

    # ------------------------------------------------------------------ facts

    def stats(self) -> dict:
        """Per loaded model: counters, queued requests and the running generation's progress."""
        return {e.model_id: self.engine_summary(e) for e in self.models.engines()}


def _safe_name(model_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model_id.strip("/~.")) or "model"
