"""The GGUF -> mlx-lm converter on a small random llama written the way llama.cpp writes it:
names, the q/k row order (checked through the model's logits), quantized and dense forms."""

import re

import pytest

from deployments.llm.gguf import (
    ConversionError,
    convert_weights,
    mlx_name,
    permuted_heads,
    quantized_bits,
    unpermute_rows,
)

SMALL = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "rms_norm_eps": 1e-5,
    "vocab_size": 96,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
TO_GGUF = {
    v: k
    for k, v in {
        "attn_q": "self_attn.q_proj",
        "attn_k": "self_attn.k_proj",
        "attn_v": "self_attn.v_proj",
        "attn_output": "self_attn.o_proj",
        "ffn_gate": "mlp.gate_proj",
        "ffn_up": "mlp.up_proj",
        "ffn_down": "mlp.down_proj",
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
    }.items()
}


@pytest.mark.parametrize(
    "gguf, mlx",
    [
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"),
        ("blk.12.attn_k.scales", "model.layers.12.self_attn.k_proj.scales"),
        ("blk.3.attn_v.biases", "model.layers.3.self_attn.v_proj.biases"),
        ("blk.29.attn_output.weight", "model.layers.29.self_attn.o_proj.weight"),
        ("blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"),
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"),
        ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
        ("blk.7.attn_norm.weight", "model.layers.7.input_layernorm.weight"),
        ("blk.7.ffn_norm.weight", "model.layers.7.post_attention_layernorm.weight"),
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("token_embd.scales", "model.embed_tokens.scales"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
    ],
)
def test_names_map_onto_mlx_lm_llama(gguf, mlx):
    assert mlx_name(gguf) == mlx


@pytest.mark.parametrize("name", ["blk.0.attn_qkv.weight", "rope_freqs.weight", "blk.0.attn_q.mystery"])
def test_unknown_names_are_refused(name):
    with pytest.raises(ConversionError):
        mlx_name(name)


def llama_cpp_permute(w, n_head):
    """What llama.cpp's convert_hf_to_gguf.py does to q_proj/k_proj rows (the reference)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def small_llama():
    """A random mlx-lm llama (Hugging Face row order) and its parameters."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    mx.random.seed(7)
    model = Model(ModelArgs.from_dict(SMALL))
    params = {k: v * 4 if v.ndim == 2 else v + 1 for k, v in tree_flatten(model.parameters())}
    return params


def build(params, **overrides):
    import mlx.core as mx
    from mlx_lm.models.llama import Model, ModelArgs

    model = Model(ModelArgs.from_dict({**SMALL, **overrides}))
    model.load_weights(list(params.items()), strict=True)
    mx.eval(model.parameters())
    return model


def logits(model):
    import mlx.core as mx

    return model(mx.array([[5, 17, 3, 60, 11, 42, 9, 2]]))


def gguf_base(name):
    """llama.cpp's tensor name (without the suffix) for an mlx-lm llama parameter."""
    if name.startswith("model.embed_tokens."):
        return "token_embd"
    if name == "model.norm.weight":
        return "output_norm"
    layer, module = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name).groups()
    return f"blk.{layer}.{TO_GGUF[module]}"


def as_gguf(params, quantize: bool):
    """`params` as llama.cpp would store them: GGUF names, permuted q/k rows, and (optionally)
    4-bit matrices with an 8-bit embedding, float16 scales, as mx.load returns Q4_1/Q8_0."""
    import mlx.core as mx

    out = {}
    for name, value in params.items():
        if ".q_proj." in name:
            value = llama_cpp_permute(value, SMALL["num_attention_heads"])
        elif ".k_proj." in name:
            value = llama_cpp_permute(value, SMALL["num_key_value_heads"])
        base = gguf_base(name)
        if quantize and value.ndim == 2:
            bits = 8 if base == "token_embd" else 4
            w, s, b = mx.quantize(value, group_size=32, bits=bits)
            out.update(
                {f"{base}.weight": w, f"{base}.scales": s.astype(mx.float16), f"{base}.biases": b.astype(mx.float16)}
            )
        else:
            out[f"{base}.weight"] = value
    return out


def test_reference_permutation_is_what_traditional_rope_expects(small_llama):
    """The check behind the converter: llama.cpp's row order with interleaved RoPE computes what
    the Hugging Face order computes with half-split RoPE. If this failed, the reference below
    would be the wrong thing to invert."""
    import mlx.core as mx

    permuted = dict(small_llama)
    for name, value in small_llama.items():
        heads = permuted_heads(name, SMALL)
        if heads:
            permuted[name] = llama_cpp_permute(value, heads)
    expected = logits(build(small_llama))
    assert mx.allclose(logits(build(permuted, rope_traditional=True)), expected, atol=1e-4)
    assert not mx.allclose(logits(build(permuted)), expected, atol=1e-2)  # the order matters


@pytest.mark.parametrize("n_head", [1, 2, 4])
def test_unpermute_inverts_llama_cpp_on_dense_and_packed_rows(n_head):
    import mlx.core as mx

    w = mx.random.normal((n_head * 16, 64))
    assert mx.array_equal(unpermute_rows(llama_cpp_permute(w, n_head), n_head), w)
    # Quantization is per row, so the row order can be undone on the packed triple.
    packed = mx.quantize(llama_cpp_permute(w, n_head), group_size=32, bits=4)
    restored = mx.dequantize(*[unpermute_rows(a, n_head) for a in packed], group_size=32, bits=4)
    assert mx.array_equal(restored, mx.dequantize(*mx.quantize(w, group_size=32, bits=4), group_size=32, bits=4))


def test_rows_that_do_not_split_into_heads_are_refused():
    import mlx.core as mx

    with pytest.raises(ConversionError):
        unpermute_rows(mx.zeros((6, 4)), 4)


def test_dense_conversion_gives_the_original_models_logits(small_llama):
    import mlx.core as mx

    converted, quantization = convert_weights(as_gguf(small_llama, quantize=False), SMALL, dense=True)
    assert quantization is None and set(converted) == set(small_llama)
    assert all(v.dtype == mx.float32 for v in converted.values())
    assert mx.allclose(logits(build(converted)), logits(build(small_llama)), atol=1e-4)


def test_quantized_conversion_keeps_bits_and_matches_the_dequantized_model(small_llama):
    import mlx.core as mx
    import mlx.nn as nn

    gguf = as_gguf(small_llama, quantize=True)
    kept, quantization = convert_weights(gguf, SMALL, dense=False)
    assert quantization == {"group_size": 32, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}}
    assert kept["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert kept["model.layers.0.self_attn.q_proj.scales"].dtype == mx.float32  # float16 would slow the CPU
    assert kept["model.norm.weight"].dtype == mx.float32

    dense, _ = convert_weights(gguf, SMALL, dense=True)
    assert all(v.dtype == mx.float32 for v in dense.values())
    from mlx_lm.models.llama import Model, ModelArgs

    model = Model(ModelArgs.from_dict(SMALL))
    nn.quantize(
        model,
        group_size=32,
        bits=4,
        class_predicate=lambda p, m: quantization.get(p, True) if hasattr(m, "to_quantized") else False,
    )
    model.load_weights(list(kept.items()), strict=True)
    from_dense = logits(build(dense))
    assert mx.allclose(logits(model), from_dense, atol=1e-3)

    # The rows are in Hugging Face order: the same as quantizing the original model directly
    # (with float16 scales, as in the file).
    def roundtrip(name, w):
        if w.ndim != 2:
            return w
        bits = 8 if name.startswith("model.embed_tokens") else 4
        q, scales, biases = mx.quantize(w, group_size=32, bits=bits)
        f16 = [a.astype(mx.float16).astype(mx.float32) for a in (scales, biases)]
        return mx.dequantize(q, *f16, group_size=32, bits=bits)

    reference = logits(build({k: roundtrip(k, v) for k, v in small_llama.items()}))
    assert mx.allclose(from_dense, reference, atol=1e-3)


@pytest.mark.parametrize(
    "weight, scales, bits", [((576, 72), (576, 18), 4), ((49152, 144), (49152, 18), 8), ((10, 8), (10, 2), 4)]
)
def test_bits_are_read_from_the_shapes(weight, scales, bits):
    assert quantized_bits(weight, scales) == bits


def test_impossible_shapes_are_refused():
    with pytest.raises(ConversionError):
        quantized_bits((10, 7), (10, 2))
