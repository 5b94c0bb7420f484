"""The VLM engine: one mlx-vlm model, one thread that owns it, streamed generation.

A request's messages (OpenAI content parts, image parts as markers in place) and its images
(checked bytes) arrive together; the engine thread opens the images, builds the prompt with
the model's chat template (mlx-vlm's `apply_chat_template`, which puts each model family's
image tokens where the parts were) and streams `mlx_vlm.stream_generate`'s text back, ending at
max_tokens, end of sequence or a stop string. Usage counts the processor's real prompt tokens
(image tokens included) and the generated ones.

mlx-vlm 0.7.10 has a BatchGenerator, but not one that takes new requests into a running
batch with images here: this engine generates one request at a time and the slot scales by
replicas (docs/api/vision.md).

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Optional

from deployments.engine_thread import EngineThread, Message
from deployments.generation.output import OutputParser
from deployments.generation.sampling import SamplingParams
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import UsageInfo

logger = logging.getLogger(__name__)


def generate_kwargs(params: SamplingParams) -> dict[str, Any]:
    """The sampling options as mlx-vlm's generate_step takes them (the same as the LLM's)."""
    kwargs: dict[str, Any] = {"max_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p}
    if params.top_k:
        kwargs["top_k"] = params.top_k
    if params.min_p:
        kwargs["min_p"] = params.min_p
    for name in ("repetition_penalty", "presence_penalty", "frequency_penalty", "logit_bias"):
        if getattr(params, name) is not None:
            kwargs[name] = getattr(params, name)
    return kwargs


@dataclass(eq=False)
class VLMJob(Message):
    messages: list[dict[str, Any]]  # role + content: a string, or text and {"type": "image"} parts
    images: list[bytes]
    sampling: SamplingParams


class VLMEngine(EngineThread[VLMJob]):
    """Owns one model. Create with `await VLMEngine.start(model_id, model_dir)`."""

    kind = "vlm"

    def __init__(self, model_id: str, model_dir: Path):
        super().__init__(model_id, model_dir)
        self.model_type: Optional[str] = None
        self.context_length: Optional[int] = None
        self._processor: Any = None
        # Written by the engine thread only.
        self.stats = {"finished": 0, "aborted": 0, "images": 0, "prompt_tokens": 0, "generated_tokens": 0}

    # ------------------------------------------------------------------ asyncio side

    def generate(
        self, messages: list[dict[str, Any]], images: list[bytes], sampling: SamplingParams
    ) -> AsyncIterator[GenerationChunk]:
        """Stream the generation; closing the iterator early stops it after the current token."""
        return self.stream(
            VLMJob(messages, images, sampling), merge=lambda chunks: reduce(GenerationChunk.merge, chunks)
        )

    # ------------------------------------------------------------------ engine thread

    def _load(self) -> None:
        from mlx_vlm import load

        t0 = time.perf_counter()
        config = json.loads((self.model_dir / "config.json").read_text())
        self.model_type = config.get("model_type")
        self.context_length = (config.get("text_config") or config).get("max_position_embeddings")
        self._model, self._processor = load(str(self.model_dir))
        logger.info(
            "Loaded VLM %s (%s) from %s in %.1fs",
            self.model_id,
            self.model_type,
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _release(self) -> None:
        self._processor = None
        super()._release()

    def _handle(self, job: VLMJob) -> None:
        import mlx.core as mx
        from mlx_vlm import stream_generate
        from mlx_vlm.prompt_utils import apply_chat_template
        from PIL import Image

        images = [Image.open(io.BytesIO(data)).convert("RGB") for data in job.images]
        prompt = apply_chat_template(self._processor, self._model.config, job.messages, num_images=len(images))
        if job.sampling.seed is not None:
            mx.random.seed(job.sampling.seed)
        parser = OutputParser(stop=job.sampling.stop)
        last, stopped = None, False
        for result in stream_generate(
            self._model, self._processor, prompt, image=images or None, **generate_kwargs(job.sampling)
        ):
            last = result
            parsed = parser.feed(result.text)
            if parsed.content:
                self._send(job, GenerationChunk(content=parsed.content))
            if parsed.stopped or job.cancelled:
                stopped = parsed.stopped
                break
        if job.cancelled:
            self.stats["aborted"] += 1
            return
        if not stopped and (tail := parser.finish().content):
            self._send(job, GenerationChunk(content=tail))
        self._send(job, self._final_chunk(job, last, stopped))

    def _final_chunk(self, job: VLMJob, last: Any, stopped: bool) -> GenerationChunk:
        prompt_tokens = int(last.prompt_tokens) if last is not None else 0
        completion_tokens = int(last.generation_tokens) if last is not None else 0
        hit_limit = not stopped and completion_tokens >= job.sampling.max_tokens
        self.stats["finished"] += 1
        self.stats["images"] += len(job.images)
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["generated_tokens"] += completion_tokens
        usage = UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
        return GenerationChunk(finish_reason="length" if hit_limit else "stop", usage=usage)
