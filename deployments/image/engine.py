"""The image engine: one mflux pipeline and the one thread that owns it.

Requests arrive from the replica's asyncio loop as `ImageJob`s (EngineThread.submit); the
engine thread runs them one at a time (a diffusion step already uses every core MLX is given;
concurrency comes from more replicas). A callback registered on the pipeline reports each
denoising step: it logs progress, updates the job's progress (the slot's stats and GET
/metrics show it) and stops a job whose client went away. Quantization (POST
/v1/models/quantize) runs on the same thread, so it never races a generation for MLX.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from deployments.engine_thread import EngineThread, Message, unloaded
from deployments.image.codec import encode_image
from deployments.image.families import ImageFamily, img2img_keep
from deployments.protocol.errors import APIError, invalid_request, server_error

logger = logging.getLogger("ray.serve")


class _Cancelled(Exception):
    """Raised inside mflux's denoising loop when the request was abandoned."""


@dataclass(eq=False)
class ImageJob(Message):
    """One request: n images of one prompt, seeds seed, seed+1, ... Built by the deployment."""

    prompt: str
    width: int
    height: int
    seeds: list[int]
    steps: int
    guidance: Optional[float] = None
    negative_prompt: Optional[str] = None
    init_image: Any = None  # img2img: an RGB PIL image
    strength: float = 0.75
    output_format: str = "png"
    output_compression: Optional[int] = None
    # progress, written by the engine thread
    image_index: int = 0
    step: int = 0
    total_steps: int = 0
    started_at: Optional[float] = None

    def progress(self) -> dict[str, Any]:
        return {
            "image": self.image_index + 1,
            "images": len(self.seeds),
            "step": self.step,
            "steps": self.total_steps,
            "width": self.width,
            "height": self.height,
            "elapsed_s": round(time.time() - self.started_at, 2) if self.started_at else 0.0,
        }


@dataclass(eq=False)
class PipelineCall(Message):
    """Other work for the engine thread (quantization): `fn(pipeline)`."""

    fn: Callable[[Any], Any]


@dataclass
class EngineStats:
    requests: int = 0
    images: int = 0
    steps: int = 0
    failed: int = 0
    cancelled: int = 0
    seconds: float = 0.0


class ImageEngine(EngineThread[Union[ImageJob, PipelineCall]]):
    """Owns one pipeline. Create with `await ImageEngine.start(...)`, release with `shutdown()`."""

    kind = "image"

    def __init__(self, model_id: str, model_dir: Path):
        super().__init__(model_id, model_dir)
        self.family: Optional[ImageFamily] = None
        self.bits: Optional[int] = None
        self.stats = EngineStats()
        self.current: Optional[ImageJob] = None
        self._pipeline = None
        self._aborting = False

    # ------------------------------------------------------------------ asyncio side

    def default_steps(self) -> int:
        return self.family.default_steps

    def check_job(self, job: ImageJob) -> None:
        """400 for options this model cannot honour (never silently ignored)."""
        family = self.family
        if job.negative_prompt and not family.negative_prompt:
            raise invalid_request(
                f"Model '{self.model_id}' ({family.name}) does not take a negative_prompt", "negative_prompt"
            )
        if job.guidance is not None and not family.guidance:
            raise invalid_request(
                f"Model '{self.model_id}' ({family.name}) is guidance-distilled and does not take 'guidance'",
                "guidance",
            )

    async def generate(self, job: ImageJob) -> list[bytes]:
        """The job's images, encoded. Cancelling the awaiting task stops the job at its next step."""
        return await self.submit(job)

    async def run(self, fn: Callable[[Any], Any]) -> Any:
        """Run `fn(pipeline)` on the engine thread, between generations."""
        return await self.submit(PipelineCall(fn))

    def progress(self) -> Optional[dict[str, Any]]:
        job = self.current
        return job.progress() if job is not None else None

    def abort_running(self) -> None:
        """Stop the running generation at its next step: an operator's unload does not wait.
        (`shutdown` alone, which Serve's LRU eviction calls, lets it finish: a request for
        another model must not kill a generation already running.)"""
        self._aborting = True
        job = self.current
        if job is not None:
            job.cancelled = True

    # ------------------------------------------------------------------ engine thread

    def _handle(self, message: Union[ImageJob, PipelineCall]) -> Any:
        if self._aborting:
            raise unloaded(self.model_id)
        if isinstance(message, PipelineCall):
            return message.fn(self._pipeline)
        return self._run_job(message)

    def _release(self) -> None:
        self._pipeline = None

    def _load(self) -> None:
        from deployments.image.pipelines import load_pipeline

        t0 = time.perf_counter()
        self.family, self._pipeline = load_pipeline(self.model_id, self.model_dir)
        self.bits = getattr(self._pipeline, "bits", None)
        self._pipeline.callbacks.register(_StepReporter(self))
        logger.info(
            "Loaded image model %s (%s, %s) from %s in %.1fs",
            self.model_id,
            self.family.name,
            f"{self.bits}-bit" if self.bits else "unquantized",
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _run_job(self, job: ImageJob) -> list[bytes]:
        self.stats.requests += 1
        self.current, job.started_at = job, time.time()
        try:
            return self._generate(job)
        finally:
            # cleared before the answer is sent: the caller may ask for progress at once
            self.current = None

    def _generate(self, job: ImageJob) -> list[bytes]:
        """The job's encoded images; raises the APIError to answer with."""
        t0 = time.perf_counter()
        try:
            images = []
            for index, seed in enumerate(job.seeds):
                job.image_index, job.step = index, 0
                image = self._pipeline.generate_image(**self._generate_kwargs(job, seed)).image
                images.append(encode_image(image, job.output_format, job.output_compression))
                self.stats.images += 1
        except _Cancelled:
            self.stats.cancelled += 1
            logger.info("Image %s: request abandoned at image %d step %d", self.model_id, job.image_index + 1, job.step)
            if self._aborting:
                raise unloaded(self.model_id) from None
            raise APIError(499, "The client went away", "cancelled") from None
        except Exception as e:  # never let one bad request kill the replica
            logger.exception("Image generation failed")
            self.stats.failed += 1
            raise server_error(f"Image generation failed: {type(e).__name__}: {e}") from None
        self.stats.seconds += time.perf_counter() - t0
        logger.info(
            "Image %s: %d image(s) %dx%d, %d steps in %.1fs",
            self.model_id,
            len(images),
            job.width,
            job.height,
            job.steps,
            time.perf_counter() - t0,
        )
        return images

    def _generate_kwargs(self, job: ImageJob, seed: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            seed=seed,
            prompt=job.prompt,
            num_inference_steps=job.steps,
            width=job.width,
            height=job.height,
        )
        guidance = job.guidance if job.guidance is not None else self.family.default_guidance
        if guidance is not None:
            kwargs["guidance"] = guidance
        if job.negative_prompt:
            kwargs["negative_prompt"] = job.negative_prompt
        if job.init_image is not None:
            kwargs["image_path"] = job.init_image  # mflux accepts a PIL image here too
            kwargs["image_strength"] = img2img_keep(job.strength)
        return kwargs

    def on_step(self, t: int, config: Any) -> None:
        """Called by mflux after every denoising step (t counts from the img2img start)."""
        job = self.current
        if job is None:
            return
        if job.cancelled:
            raise _Cancelled()
        start = config.init_time_step
        job.total_steps = config.num_inference_steps - start
        job.step = t - start + 1
        self.stats.steps += 1
        logger.info(
            "Image %s: image %d/%d step %d/%d (%.1fs)",
            self.model_id,
            job.image_index + 1,
            len(job.seeds),
            job.step,
            job.total_steps,
            time.time() - job.started_at,
        )


class _StepReporter:
    """mflux in-loop callback (duck-typed: mflux checks for `call_in_loop`)."""

    def __init__(self, engine: ImageEngine):
        self._engine = engine

    def call_in_loop(self, t, seed, prompt, latents, config, time_steps) -> None:
        import mlx.core as mx

        # mflux evaluates the step's lazy graph right after this call; evaluating it here
        # instead costs nothing extra and makes the reported step one that has really run.
        mx.eval(latents)
        self._engine.on_step(t, config)
