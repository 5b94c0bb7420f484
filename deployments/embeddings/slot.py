"""The embeddings slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.embeddings.config import EmbeddingsSlotConfig
from deployments.embeddings.minilm import MINILM_ID, ensure_minilm
from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot

SLOT = Slot(
    name="embeddings",
    deployment_name="Embeddings",
    deployment="deployments.embeddings.deployment:EmbeddingsSlot",
    config=EmbeddingsSlotConfig,
    builtins={MINILM_ID: ensure_minilm},
    # The logical CPU budget is spent by the LLM, ASR, TTS and image slots at their max_replicas;
    # memory is what limits these replicas (docs/resources.md).
    replica_resources=reserve(0, 512),
    real_model_hint="the built-in ominix-all-minilm-l6-v2 (the default)",
    routes=(Route("/v1/embeddings", 10 * MiB, 120.0),),
    # Encoder types only: Qwen3-Embedding and EmbeddingGemma share their type with LLMs (qwen3,
    # gemma3_text), so on disk they count as the LLM's.
    model_types=frozenset({"bert", "xlm-roberta", "modernbert"}),
    engine=Engine(
        "mlx-embeddings",
        "mlx-embeddings",
        "Text embeddings (mlx-embeddings: BERT-style sentence-transformers, Qwen3-Embedding, ...)",
        ("embeddings", "batching", "base64", "matryoshka"),
    ),
)
