"""The embeddings engine: one mlx-embeddings model, one thread that owns it, batched passes.

`embed(token_lists)` is the unit of work: the Serve deployment hands it the inputs of every
request in a `@serve.batch`, and the engine thread runs them through the model in one padded
forward pass (split only past `max_inputs_per_pass`, sorted by length so padding stays small).
The model's own pooling gives the vectors (mean pooling for BERT-style sentence-transformers,
last token for Qwen3-Embedding), L2-normalised. Tokenizing happens on the caller's thread
(the tokenizer is thread-safe), so the inbox holds token ids only.

No Ray here: the Serve deployment is a thin wrapper around this class.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.embeddings.vectors import truncatable_dims
from deployments.engine_thread import EngineThread, Message
from deployments.protocol.errors import invalid_request

logger = logging.getLogger(__name__)


@dataclass
class EngineConfig:
    max_inputs_per_pass: int = 256
    matryoshka: bool = False  # the operator says this model's vectors may be truncated


@dataclass(eq=False)
class EmbeddingJob(Message):
    """Token-id lists to embed together."""

    inputs: list[list[int]]


class EmbeddingsEngine(EngineThread[EmbeddingJob]):
    """Owns one model. Create with `await EmbeddingsEngine.start(model_id, model_dir, config)`."""

    kind = "embeddings"

    def __init__(self, model_id: str, model_dir: Path, config: Optional[EngineConfig] = None):
        super().__init__(model_id, model_dir)
        self.config = config or EngineConfig()
        self.tokenizer: Any = None
        self.dimensions = 0
        self.max_tokens = 512
        self.vocab_size = 0
        self.truncatable: Optional[list[int]] = None  # see vectors.truncatable_dims
        self._pad_id = 0
        # Written by the engine thread only: how batching actually went.
        self.stats = {"batches": 0, "inputs": 0, "forward_passes": 0, "largest_pass": 0, "tokens": 0}

    # ------------------------------------------------------------------ asyncio side

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each text, with the model's special tokens (what it was trained on)."""
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=True)["input_ids"]]

    def check_tokens(self, inputs: list[list[int]]) -> None:
        """400 for an input this model cannot embed: too long, or ids outside its vocabulary."""
        for i, ids in enumerate(inputs):
            if len(ids) > self.max_tokens:
                raise invalid_request(
                    f"input[{i}] has {len(ids)} tokens; model '{self.model_id}' embeds at most {self.max_tokens}.",
                    "input",
                    "context_length_exceeded",
                )
            bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise invalid_request(
                    f"input[{i}]: token id {bad} is not in this model's vocabulary [0, {self.vocab_size})", "input"
                )

    def check_dimensions(self, dimensions: Optional[int]) -> None:
        if dimensions is None:
            return
        if self.truncatable is None:
            raise invalid_request(
                f"Model '{self.model_id}' does not support `dimensions`: its vectors were not trained to be "
                f"truncated (Matryoshka); it returns {self.dimensions} dimensions.",
                "dimensions",
                "unsupported_dimensions",
            )
        if dimensions > self.dimensions or (self.truncatable and dimensions not in self.truncatable):
            allowed = ", ".join(map(str, self.truncatable)) if self.truncatable else f"1 to {self.dimensions}"
            raise invalid_request(
                f"dimensions {dimensions} is not available for model '{self.model_id}': {allowed}.",
                "dimensions",
                "unsupported_dimensions",
            )

    async def embed(self, inputs: list[list[int]]) -> np.ndarray:
        """One float32 row per input, in order, L2-normalised."""
        return await self.submit(EmbeddingJob(inputs))

    # ------------------------------------------------------------------ engine thread

    def _load(self) -> None:
        from mlx_embeddings.utils import load

        t0 = time.perf_counter()
        config = json.loads((self.model_dir / "config.json").read_text())
        self._model, self.tokenizer = load(str(self.model_dir))
        self.max_tokens = int(config.get("max_position_embeddings") or self.max_tokens)
        self.vocab_size = int(config.get("vocab_size") or len(self.tokenizer))
        self._pad_id = self.tokenizer.pad_token_id or config.get("pad_token_id") or 0
        self.truncatable = [] if self.config.matryoshka else truncatable_dims(self.model_dir, config.get("model_type"))
        self.dimensions = int(self._forward([self.tokenize(["warm-up"])[0]]).shape[-1])
        logger.info(
            "Loaded embedding model %s (%s, %d dimensions) from %s in %.1fs",
            self.model_id,
            config.get("model_type"),
            self.dimensions,
            self.model_dir,
            time.perf_counter() - t0,
        )

    def _handle(self, message: EmbeddingJob) -> np.ndarray:
        inputs = message.inputs
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        out = np.empty((len(inputs), self.dimensions), dtype=np.float32)
        step = self.config.max_inputs_per_pass
        for first in range(0, len(order), step):
            group = order[first : first + step]
            out[group] = self._forward([inputs[i] for i in group])
            self.stats["forward_passes"] += 1
            self.stats["largest_pass"] = max(self.stats["largest_pass"], len(group))
        self.stats["batches"] += 1
        self.stats["inputs"] += len(inputs)
        self.stats["tokens"] += sum(map(len, inputs))
        return out

    def _forward(self, inputs: list[list[int]]) -> np.ndarray:
        """One padded pass over `inputs`: the model's pooled, normalised vectors."""
        import mlx.core as mx

        longest = max(map(len, inputs))
        ids = np.full((len(inputs), longest), self._pad_id, dtype=np.int32)
        mask = np.zeros((len(inputs), longest), dtype=np.int32)
        for row, tokens in enumerate(inputs):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        output = self._model(mx.array(ids), attention_mask=mx.array(mask))
        return np.array(output.text_embeds.astype(mx.float32))
