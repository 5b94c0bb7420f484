"""mlx-lm's RMSNorm and RoPE compiled on the CPU backend (deployments/kernels/llm_norms.py) give
the `mx.fast` op's own results bit for bit; `apply` swaps exactly the stock layers of one model;
a model with them decodes the same tokens with the same log-probabilities as mlx-lm's."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")

from deployments.kernels import llm_norms  # noqa: E402


def _stock_and_compiled(layer):
    """The layer as built, and a copy of it with the compiled call (same weights)."""
    import copy

    compiled = copy.deepcopy(layer)
    holder = nn.Sequential(compiled)
    assert llm_norms.apply(holder) == 1
    assert type(compiled) is not type(layer)
    return layer, compiled


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1, 64), (3, 1, 64), (2, 7, 64), (4, 2, 5, 64)])
def test_a_compiled_rms_norm_is_the_fast_op_bit_for_bit(dtype, shape):
    mx.random.seed(0)
    norm = nn.RMSNorm(64, eps=1e-6)
    norm.weight = (mx.random.normal((64,)) + 1).astype(dtype)
    stock, compiled = _stock_and_compiled(norm)
    x = (mx.random.normal(shape) * 3).astype(dtype)
    assert mx.array_equal(compiled(x), stock(x)).item()


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize("offset", [0, 17, "per row"])
def test_a_compiled_rope_is_the_fast_op_bit_for_bit(traditional, offset):
    mx.random.seed(1)
    stock, compiled = _stock_and_compiled(nn.RoPE(32, traditional=traditional, base=1e6))
    for batch in (1, 3):
        x = mx.random.normal((batch, 4, 1, 64))
        at = mx.array([5, 40, 1000][:batch]) if offset == "per row" else offset
        assert mx.array_equal(compiled(x, at), stock(x, at)).item()
    # A prompt's chunk (several positions) takes the op as it is.
    chunk = mx.random.normal((2, 4, 9, 64))
    assert mx.array_equal(compiled(chunk, 3), stock(chunk, 3)).item()


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
@pytest.mark.parametrize(
    "dims,head_dim,base,scale",
    [(64, 64, 1e6, 1.0), (128, 128, 10000.0, 1.0), (32, 64, 10000.0, 1.0), (64, 64, 500000.0, 0.25)],
)
def test_a_decode_rope_is_the_fast_op_bit_for_bit(dtype, dims, head_dim, base, scale):
    """The one-token rotation made from shared angles: partial rotary dims, a position scale,
    half precision, one offset for the batch or one per row, heads or none."""
    mx.random.seed(2)
    stock, compiled = _stock_and_compiled(nn.RoPE(dims, base=base, scale=scale))
    assert compiled._decode is not None
    for shape in [(1, 4, 1, head_dim), (3, 4, 1, head_dim), (2, 1, head_dim)]:
        for position in [0, 1, 17, 1023, 4096, 131071]:
            per_row = mx.array([position + 37 * i for i in range(shape[0])], dtype=mx.int32)
            for offset in (position, per_row):
                queries, keys = (mx.random.normal(shape) * 2).astype(dtype), mx.random.normal(shape).astype(dtype)
                with llm_norms.one_forward():
                    rotated = compiled(queries, offset), compiled(keys, offset)
                assert mx.array_equal(rotated[0], stock(queries, offset)).item()
                assert mx.array_equal(rotated[1], stock(keys, offset)).item()


def test_a_layer_shares_its_angles_within_one_forward_only():
    """Within one pass the keys' call takes the angles the queries' call made for the same
    offset array; an offset updated in place (same object, new positions) gets new angles in
    the next pass, and outside a pass nothing is kept."""
    stock, compiled = _stock_and_compiled(nn.RoPE(32, base=1e4))
    decode = compiled._decode
    x = mx.random.normal((2, 4, 1, 32))
    offset = mx.array([3, 9], dtype=mx.int32)
    compiled(x, offset)  # makes the compiled angles function for this dtype and rank
    made = []
    for key, angles in list(decode._angles.items()):
        decode._angles[key] = lambda offset, angles=angles: made.append(1) or angles(offset)
    with llm_norms.one_forward():
        compiled(x, offset), compiled(x * 2, offset)
    assert len(made) == 1
    offset += 5  # as a cache's `offset += n`: the same Python object
    with llm_norms.one_forward():
        moved = compiled(x, offset)
    assert len(made) == 2
    assert mx.array_equal(moved, stock(x, mx.array([8, 14], dtype=mx.int32))).item()
    compiled(x, offset), compiled(x, offset)  # no pass: each call makes its own
    assert len(made) == 4 and decode._last == ()


def test_apply_swaps_the_stock_layers_only():
    class GemmaStyleNorm(nn.RMSNorm):  # a model's own subclass: its call is its own
        pass

    model = nn.Sequential(nn.RMSNorm(8), nn.RoPE(8), GemmaStyleNorm(8), nn.Linear(8, 8))
    assert llm_norms.apply(model) == 2
    assert [type(m).__name__ for m in model.layers] == ["CompiledRMSNorm", "CompiledRoPE", "GemmaStyleNorm", "Linear"]
    assert set(model.parameters()["layers"][0]) == {"weight"}  # nothing added to the weights


@pytest.mark.parametrize("model_name", ["tiny_llm_dir", "smollm2_dir"])
def test_a_model_with_compiled_norms_decodes_as_mlx_lm_does(model_name, request):
    """Greedy, in one batch of rows of different lengths: the same tokens, and log-probabilities
    equal to the last bit."""
    import mlx_lm
    import numpy as np

    from deployments.llm.batch import Batch, Sequence
    from deployments.llm.sampler import RowSampler

    model_dir = request.getfixturevalue(model_name)
    answers = []
    for compiled in (False, True):
        model, tokenizer = mlx_lm.load(str(model_dir))
        if compiled:
            assert llm_norms.apply(model) > 0
        batch = Batch(model, capacity=4, prefill_batch=2)
        prompts = [tokenizer.encode(t) for t in ("The capital of France is", "Count: 1, 2, 3,", "Hi")]
        uids = [batch.insert(Sequence([p], 10, RowSampler(), logprobs=True)) for p in prompts]
        events = {u: [] for u in uids}
        while not all(v and v[-1].finish_reason for v in events.values()):
            for e in batch.next()[1]:
                events[e.uid].append(e)
        answers.append(
            [([e.token for e in events[u]], np.stack([np.array(e.logprobs) for e in events[u]])) for u in uids]
        )
    for (tokens, logprobs), (same_tokens, same_logprobs) in zip(*answers):
        assert tokens == same_tokens
        assert np.array_equal(logprobs, same_logprobs)


def test_the_engine_path_follows_the_kernel_switch_and_builds_at_load(tiny_llm_dir, monkeypatch):
    """`compile_served` (what the LLM engine calls at load) leaves the model as mlx-lm built it
    when OMINIX_CPU_KERNELS leaves `llm_norms` out; otherwise it swaps the layers and runs one
    token through them."""
    import mlx_lm

    monkeypatch.setenv("OMINIX_CPU_KERNELS", "llm_attention")
    model, _ = mlx_lm.load(str(tiny_llm_dir))
    assert llm_norms.compile_served(model) == 0
    assert not any(isinstance(m, (llm_norms.CompiledRMSNorm, llm_norms.CompiledRoPE)) for _, m in model.named_modules())
    monkeypatch.delenv("OMINIX_CPU_KERNELS")
    assert llm_norms.compile_served(model) > 0
    assert any(isinstance(m, llm_norms.CompiledRoPE) for _, m in model.named_modules())
