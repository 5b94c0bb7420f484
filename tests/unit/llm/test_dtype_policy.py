"""The LLM slot's CPU dtype policy: what it decides for each form of weights, and that its
upcast (bf16 -> float32) and dequantisation (4-bit -> float32) keep the model's function."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import mlx_lm
import pytest
from mlx.utils import tree_flatten

from deployments.llm.dtype_policy import Weights, decide, inspect_weights, upcast

BF16 = Weights(frozenset({"bfloat16"}), False, 200, 400)
Q4 = Weights(frozenset({"uint32", "bfloat16"}), True, 70, 400)
F32 = Weights(frozenset({"float32"}), False, 400, 400)


def test_decisions():
    assert decide("auto", True, BF16, 1 << 30).upcast and decide("auto", True, Q4, 1 << 30).upcast
    assert not decide("auto", False, BF16, 1 << 30).upcast  # Metal: fast as it is
    assert not decide("keep", True, BF16, 1 << 30).upcast
    too_big = decide("auto", True, BF16, 399)
    assert not too_big.upcast and "cpu_upcast_max_bytes" in too_big.reason
    assert decide("float32", True, BF16, 399).upcast  # float32: whatever the size
    assert not decide("float32", True, F32, 1 << 30).upcast and F32.dense_float32
    assert Q4.form == "quantized + bfloat16" and BF16.form == "bfloat16"


@pytest.fixture
def tiny(tiny_llm_dir):
    model, tokenizer = mlx_lm.load(str(tiny_llm_dir))
    return model, mx.array([tokenizer.encode("The quick brown fox")])


def test_bf16_weights_become_the_same_values_in_float32(tiny):
    model, tokens = tiny
    model.set_dtype(mx.bfloat16)
    weights = inspect_weights(model)
    assert weights.dtypes == {"bfloat16"} and not weights.quantized and weights.float32_bytes == 2 * weights.bytes
    before = {k: v.astype(mx.float32) for k, v in tree_flatten(model.parameters())}
    upcast(model)
    after = dict(tree_flatten(model.parameters()))
    assert inspect_weights(model).dense_float32
    assert all(mx.array_equal(before[k], after[k]).item() for k in before)  # exact


def test_quantized_weights_dequantize_to_the_same_function(tiny):
    model, tokens = tiny
    float32_bytes = inspect_weights(model).bytes
    nn.quantize(model, group_size=32, bits=4)
    weights = inspect_weights(model)
    assert weights.quantized and weights.float32_bytes == float32_bytes and weights.bytes < float32_bytes / 3
    quantized_logits = model(tokens)
    upcast(model)
    assert inspect_weights(model).dense_float32
    assert not any(hasattr(m, "scales") for _, m in model.named_modules())
    assert mx.allclose(model(tokens), quantized_logits, atol=1e-4).item()


@pytest.fixture(scope="module")
def bf16_dir(tiny_llm_dir, tmp_path_factory):
    """The tiny model saved as bfloat16, as mlx-community ships checkpoints."""
    import shutil

    out = tmp_path_factory.mktemp("tiny-bf16")
    for f in tiny_llm_dir.iterdir():
        if f.suffix == ".safetensors":
            weights = mx.load(str(f))
            mx.save_safetensors(str(out / f.name), {k: v.astype(mx.bfloat16) for k, v in weights.items()})
        elif f.is_file():
            shutil.copy(f, out / f.name)
    return out


@pytest.mark.parametrize("setting,served", [("auto", "float32"), ("keep", "bfloat16")])
async def test_the_engine_serves_a_bf16_checkpoint_as_its_policy_says(bf16_dir, setting, served):
    from deployments.llm.engine import EngineConfig, LLMEngine

    engine = await LLMEngine.start("tiny-bf16", bf16_dir, EngineConfig(cpu_dtype=setting))
    try:
        assert engine.stats["weights_as_loaded"] == "bfloat16" and engine.stats["weights"] == served
    finally:
        engine.shutdown()
