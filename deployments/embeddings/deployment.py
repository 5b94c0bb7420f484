"""The embeddings slot as a Ray Serve deployment: a thin adapter from Serve to `EmbeddingsEngine`.

A request is checked and tokenized here (in a worker thread), then joins a `@serve.batch`
queue (embeddings.max_batch_size / batch_wait_s). Each batch is split by model, and each part
is one call to its engine: the inputs of all its requests in one forward pass. Models are
multiplexed per replica as in the other slots.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ray import serve

from deployments.embeddings.engine import EmbeddingsEngine, EngineConfig
from deployments.embeddings.metrics import EmbeddingsMetrics
from deployments.embeddings.slot import SLOT
from deployments.embeddings.vectors import truncate
from deployments.protocol.embeddings import EmbeddingRequest, EmbeddingResponse, embedding_response
from deployments.slot_replica import SlotReplica

logger = logging.getLogger("ray.serve")


@dataclass
class _Job:
    """One request inside a batch."""

    engine: EmbeddingsEngine
    inputs: list[list[int]]


@serve.deployment
class EmbeddingsSlot(SlotReplica):
    slot = SLOT
    file_patterns = ["*.json", "*.safetensors", "*.txt", "*.model", "1_Pooling/*"]
    metrics_class = EmbeddingsMetrics

    async def setup(self) -> None:
        self.batch_sizes: dict[int, int] = defaultdict(int)  # requests per batch -> how many batches
        self._batched.set_max_batch_size(self.config.max_batch_size)
        self._batched.set_batch_wait_timeout_s(self.config.batch_wait_s if self.config.max_batch_size > 1 else 0.0)
        logger.info(
            "Embeddings batching: up to %d requests per batch, %.0f ms wait",
            self.config.max_batch_size,
            self.config.batch_wait_s * 1000,
        )

    async def start_engine(self, model_id: str, model_dir: Path) -> EmbeddingsEngine:
        config = EngineConfig(
            max_inputs_per_pass=self.config.max_inputs_per_pass,
            matryoshka=model_id in self.config.matryoshka_models,
        )
        return await EmbeddingsEngine.start(model_id, model_dir, config)

    async def embed(self, request: EmbeddingRequest) -> EmbeddingResponse:
        started = time.perf_counter()
        engine = await self.engine()
        engine.check_dimensions(request.dimensions)
        inputs = request.inputs()
        if isinstance(inputs[0], str):
            inputs = await asyncio.to_thread(engine.tokenize, inputs)
        engine.check_tokens(inputs)
        rows = await self._batched(_Job(engine, inputs))
        if isinstance(rows, BaseException):
            raise rows
        tokens = sum(map(len, inputs))
        self.metrics.embedded(engine.model_id, len(inputs), tokens, time.perf_counter() - started)
        vectors = truncate(rows, request.dimensions)
        return embedding_response(list(vectors), engine.model_id, tokens, request.encoding_format)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)  # replaced in setup() from the config
    async def _batched(self, jobs: list[_Job]) -> list[np.ndarray | BaseException]:
        self.batch_sizes[len(jobs)] += 1
        results: list[np.ndarray | BaseException] = [None] * len(jobs)  # type: ignore[list-item]
        by_engine: dict[int, list[int]] = defaultdict(list)
        for i, job in enumerate(jobs):
            by_engine[id(job.engine)].append(i)
        for indices in by_engine.values():
            inputs = [ids for i in indices for ids in jobs[i].inputs]
            try:
                rows = await jobs[indices[0]].engine.embed(inputs)  # one forward pass for the group
            except BaseException as e:  # every request of the failed group gets the error
                rows = e
            offset = 0
            for i in indices:
                count = len(jobs[i].inputs)
                results[i] = rows if isinstance(rows, BaseException) else rows[offset : offset + count]
                offset += count
        return results

    def stats(self) -> dict:
        """Batches seen by size, and each engine's forward-pass counters."""
        return {
            "batch_sizes": dict(self.batch_sizes),
            "engines": {e.model_id: dict(e.stats) for e in self.models.engines()},
        }
