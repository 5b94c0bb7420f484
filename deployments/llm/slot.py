"""The LLM slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.llm.config import LLMSlotConfig
from deployments.llm.smollm2 import SMOLLM2_ID, ensure_smollm2
from deployments.llm.tiny_model import TINY_LLM_ID, ensure_tiny_llm
from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot

SLOT = Slot(
    name="llm",
    deployment_name="LLM",
    deployment="deployments.llm.deployment:LLMSlot",
    config=LLMSlotConfig,
    builtins={SMOLLM2_ID: ensure_smollm2, TINY_LLM_ID: ensure_tiny_llm},
    random_builtins=frozenset({TINY_LLM_ID}),
    replica_resources=reserve(0.1, 1024),  # SmolLM2 dense float32: 777 MiB peak
    real_model_hint=f"the default {SMOLLM2_ID}, or LLM_MODEL=mlx-community/Qwen3-0.6B-4bit on a Mac",
    routes=(
        Route("/v1/chat/completions", 20 * MiB, 300.0),
        Route("/v1/completions", 20 * MiB, 300.0),
        Route("/v1/responses", 20 * MiB, 300.0),
        Route("/v1/conversations", 20 * MiB, 60.0),  # items as large as a response's input
        Route("/v1/messages", 20 * MiB, 300.0),
        # vLLM's run-time LoRA adapters: a load is checked on a replica, which may load the base first.
        Route("/v1/load_lora_adapter", 64 * 1024, 300.0, card=False),
        Route("/v1/unload_lora_adapter", 64 * 1024, 30.0, card=False),
    ),
    # mlx-lm serves most text architectures: a model whose type no other slot lists is the LLM's.
    other_model_types=True,
    engine=Engine(
        "mlx-lm",
        "mlx-lm",
        "Chat and completions with continuous batching (mlx-lm BatchGenerator)",
        (
            "chat",
            "completions",
            "streaming",
            "continuous_batching",
            "tool_use",
            "thinking",
            "multiplexing",
            "lora_adapters",
        ),
    ),
)
