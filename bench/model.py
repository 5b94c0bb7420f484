"""The LLM benchmark model: a real Qwen3 architecture (mlx-lm format) with random weights,
big enough that matrix work, not Python overhead, dominates a decode step.

Its output rows for the special tokens and for ids the small tokenizer never produces are
zero, so under greedy decoding end-of-sequence never wins: every system generates exactly
`max_tokens` (the harness still checks the token counts it is told in `usage`).
"""

from __future__ import annotations

import json
from pathlib import Path

from deployments.hub import build_model_dir
from deployments.llm import tiny_model
from deployments.tiny_models import QWEN3_SPECIAL_TOKENS

# ~124M parameters (GPT-2 small's scale; 40M of them the untied 32k embedding and output).
BENCH_CONFIG = {
    **tiny_model.MODEL_CONFIG,
    "hidden_size": 640,
    "num_hidden_layers": 12,
    "intermediate_size": 1792,
    "num_attention_heads": 10,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 32768,
    "tie_word_embeddings": False,
}
# The smoke test's model: same code path, seconds to generate and run.
SMOKE_CONFIG = {**tiny_model.MODEL_CONFIG, "vocab_size": 2048, "tie_word_embeddings": False}
_FORMAT_VERSION = 1
FORMS = ("float32", "bfloat16", "4bit")  # what checkpoints ship: the random model's, mlx-community's


def parameter_count(config: dict) -> int:
    h, layers, inter, vocab = (
        config[k] for k in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    )
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    per_layer = h * q * 2 + h * kv * 2 + 3 * h * inter + 2 * h + 2 * config["head_dim"]
    embeddings = vocab * h * (1 if config["tie_word_embeddings"] else 2)
    return layers * per_layer + embeddings + h


def ensure_bench_model(cache_dir: Path, config: dict = BENCH_CONFIG) -> Path:
    name = f"ominix-bench-qwen3-{parameter_count(config) // 1_000_000}m-v{_FORMAT_VERSION}"

    def write(work: Path) -> None:
        tiny_model._write_tokenizer(work, config)
        used = json.loads((work / "tokenizer.json").read_text())["model"]["vocab"]
        never = set(range(len(QWEN3_SPECIAL_TOKENS))) | set(range(len(used), config["vocab_size"]))
        tiny_model._write_weights(work, config, zero_logit_tokens=tuple(sorted(never)))
        (work / "config.json").write_text(json.dumps(config, indent=2))
        (work / "generation_config.json").write_text(json.dumps({"eos_token_id": config["eos_token_id"]}))

    return build_model_dir(Path(cache_dir).expanduser() / name, write, f"the benchmark model {name}")


def ensure_form(model_dir: Path, form: str) -> Path:
    """`model_dir` (dense float32) as the checkpoint form `form`, beside it: bfloat16 weights,
    or mlx-lm's 4-bit quantisation (group 64), as mlx-community repos ship them."""
    if form == "float32":
        return model_dir
    if form not in FORMS:
        raise ValueError(f"--llm-form must be one of {', '.join(FORMS)}")

    def write(work: Path) -> None:
        import mlx.core as mx
        import mlx.nn as nn
        import mlx_lm
        from mlx_lm.utils import save_model

        model, _ = mlx_lm.load(str(model_dir))
        config = json.loads((model_dir / "config.json").read_text())
        if form == "4bit":
            nn.quantize(model, group_size=64, bits=4)
            config["quantization"] = {"group_size": 64, "bits": 4}
        model.set_dtype(mx.bfloat16)  # scales too, as mlx-community's bf16-based 4-bit repos
        save_model(work, model)
        (work / "config.json").write_text(json.dumps(config, indent=2))
        for f in model_dir.iterdir():
            if (
                f.is_file()
                and f.suffix != ".safetensors"
                and f.name not in ("config.json", "model.safetensors.index.json")
            ):
                (work / f.name).write_bytes(f.read_bytes())

    return build_model_dir(model_dir.parent / f"{model_dir.name}-{form}", write, f"{model_dir.name} as {form}")
