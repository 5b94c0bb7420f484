"""The VLM slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot
from deployments.vlm.config import VLMSlotConfig
from deployments.vlm.tiny_model import TINY_VLM_ID, ensure_tiny_vlm

SLOT = Slot(
    name="vlm",
    deployment_name="VLM",
    deployment="deployments.vlm.deployment:VLMSlot",
    config=VLMSlotConfig,
    builtins={TINY_VLM_ID: ensure_tiny_vlm},
    random_builtins=frozenset({TINY_VLM_ID}),
    replica_resources=reserve(0, 512),  # as the embeddings slot: memory limits these
    real_model_hint="VLM_MODEL=mlx-community/Qwen2.5-VL-3B-Instruct-4bit (needs network once)",
    # Chat with images arrives on the LLM slot's /v1/chat/completions (its body cap).
    routes=(Route("/v1/vlm/completions", 20 * MiB, 300.0),),
    model_types=frozenset(
        {
            "qwen2_vl",
            "qwen2_5_vl",
            "qwen3_vl",
            "smolvlm",
            "idefics2",
            "idefics3",
            "llava",
            "llava_next",
            "paligemma",
            "pixtral",
            "mllama",
        }
    ),
    engine=Engine(
        "mlx-vlm",
        "mlx-vlm",
        "Vision-language chat (mlx-vlm: Qwen2-VL, Qwen2.5-VL, SmolVLM, ...)",
        ("vision", "chat", "streaming", "multiplexing"),
    ),
)
