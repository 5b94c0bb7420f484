"""The built-in tiny LLM: a real Qwen3 checkpoint with random weights, made on first use.

It lets the default graph start and serve every LLM route on a machine with no network:
the files are exactly what mlx-lm expects of a Hugging Face checkpoint (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json with Qwen3's chat template), so it
loads through `mlx_lm.load` and runs the same code paths as a real model. Its output is
meaningless text.

Generation is deterministic (fixed seeds, a fixed training corpus for the BPE tokenizer) and
atomic (built in a temporary directory, then renamed), so concurrent replicas can race safely.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from deployments.hub import build_model_dir
from deployments.tiny_models import QWEN3_EOS, write_qwen3_tokenizer

logger = logging.getLogger(__name__)

TINY_LLM_ID = "ominix-tiny-qwen3"
# Bump when the generated files change, so old caches are not reused.
_FORMAT_VERSION = 1

MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "bos_token_id": None,
    "eos_token_id": 2,  # <|im_end|>: deployments/tiny_models.QWEN3_SPECIAL_TOKENS
}


def tiny_llm_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_LLM_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_llm(cache_dir: str | os.PathLike) -> Path:
    """Return the tiny model's directory, generating it first if it is not there yet."""

    def write(work: Path) -> None:
        _write_tokenizer(work)
        _write_weights(work)
        (work / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2))
        (work / "generation_config.json").write_text(json.dumps({"eos_token_id": MODEL_CONFIG["eos_token_id"]}))
        (work / "README.md").write_text(
            "Built-in tiny Qwen3 model of ominix-serve: random weights, meaningless output.\n"
        )

    return build_model_dir(tiny_llm_dir(cache_dir), write, f"the built-in tiny LLM {TINY_LLM_ID}")


def _write_tokenizer(out: Path, config: dict = MODEL_CONFIG) -> None:
    vocab_size = min(config["vocab_size"], MODEL_CONFIG["vocab_size"])
    tokenizer = write_qwen3_tokenizer(out, vocab_size, config["max_position_embeddings"])
    assert tokenizer.get_vocab_size() <= config["vocab_size"]
    assert tokenizer.token_to_id(QWEN3_EOS) == config["eos_token_id"]
    (out / "special_tokens_map.json").write_text(json.dumps({"eos_token": QWEN3_EOS, "pad_token": "<|endoftext|>"}))


def _write_weights(out: Path, config: dict = MODEL_CONFIG, zero_logit_tokens: tuple[int, ...] = ()) -> None:
    """Random weights for `config` (its `model_type`: an mlx-lm architecture). Tokens in
    `zero_logit_tokens` get an all-zero output row (needs untied embeddings): their logit is
    always 0, below the greedy winner."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    architecture = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(0)
    model = architecture.Model(architecture.ModelArgs.from_dict(config))
    # Scale weights up from the default init so greedy decoding has clear winners:
    # with near-flat logits, float rounding differences between a batched and a single
    # forward pass could flip an argmax, and batching must not change greedy output.
    params = {}
    for i, (name, value) in enumerate(tree_flatten(model.parameters())):
        if name.endswith("norm.weight"):
            params[name] = mx.ones(value.shape, dtype=mx.float32)
        else:
            fan_in = value.shape[-1]
            key = mx.random.key(i)
            params[name] = mx.random.normal(value.shape, key=key) * (2.0 / fan_in**0.5)
    if zero_logit_tokens:
        head = params["lm_head.weight"]
        rows = mx.array(list(zero_logit_tokens))
        head[rows] = 0.0
        params["lm_head.weight"] = head
    mx.save_safetensors(str(out / "model.safetensors"), params, metadata={"format": "mlx"})
