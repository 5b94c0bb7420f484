"""The VLM engine: one mlx-vlm model, one thread that owns it, streamed generation.

A request's messages (OpenAI content parts, image parts as markers in place) and its images
(checked bytes) arrive together; the engine thread opens the images, builds the prompt with
the model's chat template (mlx-vlm's `apply_chat_template`, which puts each model family's
image tokens where the parts were) and streams `mlx_vlm.stream_generate`'s text back, ending at
max_tokens, end of sequence or a stop string. Usage counts the processor's real prompt tokens
(image tokens included) and the generated ones. With logprobs asked for, each chunk carries its
tokens' entries, out of the log-softmax mlx-vlm samples from (deployments/generation/logprobs.py).

mlx-vlm 0.7.10 has a BatchGenerator, but not one that takes new requests into a running
batch with images here: this engine generates one request at a time and the slot scales by
replicas (docs/api/vision.md).

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import io
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from deployments.engine_thread import EngineThread, Message
from deployments.generation.logprobs import TokenBytes, entry
from deployments.generation.output import OutputParser
from deployments.generation.sampling import SamplingParams
from deployments.protocol.generation import GenerationChunk, merge_by_choice, merged_chunks
from deployments.protocol.logprobs import TokenLogprob
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
    logprobs: Optional[int] = None  # alternatives per token's entry; None: no logprobs
    n: int = 1  # choices, generated one after the other


class VLMEngine(EngineThread[VLMJob]):
    """Owns one model. Create with `await VLMEngine.start(model_id, model_dir)`."""

    kind = "vlm"

    def __init__(self, model_id: str, model_dir: Path):
        super().__init__(model_id, model_dir)
        self.model_type: Optional[str] = None
        self.context_length: Optional[int] = None
        self._processor: Any = None
        self._token_bytes: Optional[TokenBytes] = None
        # Written by the engine thread only.
        self.stats = {"finished": 0, "aborted": 0, "images": 0, "prompt_tokens": 0, "generated_tokens": 0}

    # ------------------------------------------------------------------ asyncio side

    def generate(
        self,
        messages: list[dict[str, Any]],
        images: list[bytes],
        sampling: SamplingParams,
        logprobs: Optional[int] = None,
        n: int = 1,
    ) -> AsyncIterator[GenerationChunk]:
        """Stream the generation; closing the iterator early stops it after the current token.
        `logprobs`: each token's entry with that many alternatives (None: no entries); `n`
        choices, each chunk naming its `index`."""
        return merged_chunks(self.stream(VLMJob(messages, images, sampling, logprobs, n), merge=merge_by_choice))

    # ------------------------------------------------------------------ engine thread

    def _load(self) -> None:
        from mlx_vlm import load

        t0 = time.perf_counter()
        config = json.loads((self.model_dir / "config.json").read_text())
        self.model_type = config.get("model_type")
        self.context_length = (config.get("text_config") or config).get("max_position_embeddings")
        self._model, self._processor = load(str(self.model_dir))
        self._token_bytes = TokenBytes(self._processor)  # the processor has the detokenizer
        logger.info(
            "Loaded VLM %s (%s) from %s in %.1fs",
            self.model_id,
            self.model_type,
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _release(self) -> None:
        self._processor = self._token_bytes = None
        super()._release()

    def _handle(self, job: VLMJob) -> None:
        """The request's `n` choices, one after the other on the same prompt (mlx-vlm generates
        one sequence at a time); the last choice's last chunk carries the usage of all of them,
        the prompt counted once, as the LLM's does."""
        import mlx.core as mx
        from mlx_vlm.prompt_utils import apply_chat_template
        from PIL import Image

        images = [Image.open(io.BytesIO(data)).convert("RGB") for data in job.images]
        prompt = apply_chat_template(self._processor, self._model.config, job.messages, num_images=len(images))
        if job.sampling.seed is not None:  # once: the choices differ, and the request repeats
            mx.random.seed(job.sampling.seed)
        prompt_tokens = completion_tokens = 0
        for index in range(job.n):
            ended = self._choice(job, index, prompt, images)
            if ended is None:
                self.stats["aborted"] += 1
                return
            last, stopped = ended
            prompt_tokens = int(last.prompt_tokens) if last is not None else prompt_tokens
            tokens = int(last.generation_tokens) if last is not None else 0
            completion_tokens += tokens
            final = GenerationChunk(index=index, finish_reason=self._finish_reason(job, tokens, stopped))
            if index == job.n - 1:
                final.usage = self._usage(job, prompt_tokens, completion_tokens)
            self._send(job, final)

    def _choice(self, job: VLMJob, index: int, prompt: str, images: list) -> Optional[tuple[Any, bool]]:
        """One choice's text chunks, sent as they come; (mlx-vlm's last result, whether a stop
        string ended it), or None when the caller left."""
        from mlx_vlm import stream_generate

        parser = OutputParser(stop=job.sampling.stop)
        last, stopped = None, False
        pending: list[TokenLogprob] = []  # entries of tokens whose text has not gone out yet
        for result in stream_generate(
            self._model, self._processor, prompt, image=images or None, **generate_kwargs(job.sampling)
        ):
            last = result
            # mlx-vlm's closing result (finish_reason set) repeats the last token, or names the
            # end-of-sequence token, which is not part of the answer: no entry of its own.
            if job.logprobs is not None and result.logprobs is not None and result.finish_reason is None:
                pending.append(self._entry(result.token, result.logprobs, job.logprobs))
            parsed = parser.feed(result.text)
            if parsed.content:
                self._send(job, self._content(job, index, parsed.content, pending))
            if parsed.stopped or job.cancelled:
                stopped = parsed.stopped
                break
        if job.cancelled:
            return None
        if not stopped and (tail := parser.finish().content):
            self._send(job, self._content(job, index, tail, pending))
        return last, stopped

    @staticmethod
    def _content(job: VLMJob, index: int, text: str, pending: list[TokenLogprob]) -> GenerationChunk:
        """A text chunk with the entries of the tokens it came from (a token whose text is held
        back, as a possible stop string, waits for the next chunk; a stop string's are dropped)."""
        if job.logprobs is None:
            return GenerationChunk(index=index, content=text)
        entries, pending[:] = list(pending), []
        return GenerationChunk(index=index, content=text, logprobs=entries)

    def _entry(self, token: int, logprobs: Any, keep: int) -> TokenLogprob:
        """The chosen token's entry and the `keep` likeliest alternatives, out of its row."""
        import mlx.core as mx

        row = logprobs.reshape(-1).astype(mx.float32)
        top: list[tuple[int, float]] = []
        if keep > 0:
            ids = mx.argpartition(-row, kth=keep - 1)[:keep]
            top = [(i, v) for i, v in zip(ids.tolist(), row[ids].tolist()) if v > -math.inf]
        return entry(self._token_bytes, token, row[token].item(), top, keep)

    @staticmethod
    def _finish_reason(job: VLMJob, tokens: int, stopped: bool) -> str:
        return "length" if not stopped and tokens >= job.sampling.max_tokens else "stop"

    def _usage(self, job: VLMJob, prompt_tokens: int, completion_tokens: int) -> UsageInfo:
        self.stats["finished"] += 1
        self.stats["images"] += len(job.images)
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["generated_tokens"] += completion_tokens
        return UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )
