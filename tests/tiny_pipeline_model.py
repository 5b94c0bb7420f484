"""A random-weight tiny model of an architecture mlx-lm can pipeline (Ministral 3: its layers
split over ranks, `model.model.pipeline(group)`), for the sharded slot's pipeline-parallel tests.
Same tokenizer and weight recipe as the built-in tiny Qwen3 (deployments/llm/tiny_model.py)."""

from __future__ import annotations

import json
from pathlib import Path

from deployments.hub import build_model_dir
from deployments.llm import tiny_model

CONFIG = {
    **tiny_model.MODEL_CONFIG,
    "architectures": ["Ministral3ForCausalLM"],
    "model_type": "ministral3",
    "num_hidden_layers": 4,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1000000.0,
        "llama_4_scaling_beta": 0.1,
        "original_max_position_embeddings": 4096,
    },
}


def ensure_tiny_pipeline_model(cache_dir) -> Path:
    def write(work: Path) -> None:
        tiny_model._write_tokenizer(work, CONFIG)
        tiny_model._write_weights(work, CONFIG)
        (work / "config.json").write_text(json.dumps(CONFIG, indent=2))
        (work / "generation_config.json").write_text(json.dumps({"eos_token_id": CONFIG["eos_token_id"]}))

    return build_model_dir(Path(cache_dir).expanduser() / "ominix-tiny-ministral3-v1", write, "a tiny Ministral 3")
