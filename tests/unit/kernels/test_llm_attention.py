"""mlx-lm's prefill attention through numpy (deployments/kernels/llm_attention.py) gives MLX's
own results for every mask form mlx-lm passes, leaves what it does not cover to MLX, and a real
prefill with it installed produces the same logits and greedy tokens."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
np = pytest.importorskip("numpy")

from deployments.kernels import llm_attention as kernel  # noqa: E402


def _qkv(batch, heads, kv_heads, rows, length, dim=16, seed=0):
    mx.random.seed(seed)
    q = mx.random.normal((batch, heads, rows, dim)) * 2  # spread scores: the max shift matters
    k = mx.random.normal((batch, kv_heads, length, dim))
    v = mx.random.normal((batch, kv_heads, length, dim))
    return q, k, v


def _mlx(q, k, v, mask, scale=0.25):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


def _ours(q, k, v, mask, scale=0.25):
    host = np.asarray(mask) if isinstance(mask, mx.array) else mask
    return kernel.numpy_attention(np.asarray(q), np.asarray(k), np.asarray(v), scale, host)


@pytest.mark.parametrize(
    "batch,heads,kv_heads,rows,length",
    [
        (1, 10, 2, 300, 300),  # a whole prompt: three row blocks, the last partial
        (1, 10, 2, 129, 700),  # a later chunk: rows see the cache before them
        (2, 4, 4, 64, 64),  # no grouping, a batch
        (1, 6, 1, 5, 9),  # one KV head for all
    ],
)
def test_causal_matches_mlx(batch, heads, kv_heads, rows, length):
    q, k, v = _qkv(batch, heads, kv_heads, rows, length, seed=rows + length)
    np.testing.assert_allclose(_ours(q, k, v, "causal"), np.asarray(_mlx(q, k, v, "causal")), atol=2e-5)


def test_no_mask_matches_mlx():
    q, k, v = _qkv(1, 4, 2, 40, 90)
    np.testing.assert_allclose(_ours(q, k, v, None), np.asarray(_mlx(q, k, v, None)), atol=2e-5)


def test_left_padded_batch_mask_matches_mlx():
    """A batched prefill's mask (mlx-lm's `create_causal_mask` with left padding): the padded
    rows are masked everywhere, and MLX averages V there; so do we (no NaN into later layers)."""
    from mlx_lm.models.base import create_causal_mask

    rows = 150
    q, k, v = _qkv(3, 10, 2, rows, rows)
    mask = create_causal_mask(rows, offset=0, left_padding=mx.array([0, 7, 140]))
    got = _ours(q, k, v, mask)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, np.asarray(_mlx(q, k, v, mask)), atol=2e-5)


def test_per_head_boolean_and_additive_masks_match_mlx():
    q, k, v = _qkv(2, 4, 2, 20, 30)
    rng = np.random.default_rng(1)
    keep = rng.random((2, 4, 20, 30)) > 0.3
    keep[..., 0] = True
    boolean = mx.array(keep)
    additive = mx.array(np.where(keep, 0.0, -1e9).astype(np.float32))
    for mask in (boolean, additive, boolean[:, :1], mx.array(keep[0, 0])):
        np.testing.assert_allclose(_ours(q, k, v, mask), np.asarray(_mlx(q, k, v, mask)), atol=2e-5)


def test_what_it_does_not_cover_goes_to_mlx_lm():
    q, k, v = _qkv(1, 10, 2, 300, 300)
    assert kernel.applies(q, k, None, None)
    assert not kernel.applies(q[:, :, :1], k, None, None)  # a decode step
    assert not kernel.applies(q.astype(mx.bfloat16), k.astype(mx.bfloat16), None, None)
    assert not kernel.applies(q, k, None, mx.zeros((10,)))  # attention sinks

    class Quantized:
        bits, group_size = 8, 64

    assert not kernel.applies(q, k, Quantized(), None)
    small = _qkv(1, 2, 2, 4, 4)
    assert not kernel.applies(small[0], small[1], None, None)  # a short prompt: MLX is cheaper


@pytest.fixture
def mlx_lm_own():
    """mlx-lm's own attention for the test (an engine earlier in the process installed ours),
    put back as it was after."""
    was_installed = kernel._state["original"] is not None
    kernel.uninstall()
    yield
    if was_installed:
        kernel.install()
    else:
        kernel.uninstall()


def test_install_reaches_imported_models_and_uninstall_restores(mlx_lm_own):
    from mlx_lm.models import base, qwen3

    original = base.scaled_dot_product_attention
    assert original is not kernel.scaled_dot_product_attention
    try:
        assert kernel.install()
        assert qwen3.scaled_dot_product_attention is kernel.scaled_dot_product_attention
        assert base.scaled_dot_product_attention is kernel.scaled_dot_product_attention
    finally:
        kernel.uninstall()
    assert qwen3.scaled_dot_product_attention is original
    assert base.scaled_dot_product_attention is original


def test_a_real_prefill_gives_the_same_logits_and_greedy_tokens(tmp_path, mlx_lm_own):
    """The tiny Qwen3 (random weights, float32): a 400-token prompt prefilled in 128-token
    chunks then decoded greedily, with MLX's attention and with ours."""
    import mlx_lm
    from mlx_lm.generate import generate_step

    from deployments.llm.tiny_model import ensure_tiny_llm

    model, _ = mlx_lm.load(str(ensure_tiny_llm(tmp_path)))
    prompt = mx.array([(i * 37) % 500 + 3 for i in range(400)])

    def run():
        steps = generate_step(prompt, model, max_tokens=8, prefill_step_size=128)
        return [(int(t), np.asarray(logprobs)) for t, logprobs in steps]

    reference = run()
    try:
        assert kernel.install()
        calls = []
        inner = kernel.numpy_attention

        def counting(*args):
            calls.append(args[0].shape)
            return inner(*args)

        kernel.numpy_attention = counting
        ours = run()
    finally:
        kernel.numpy_attention = inner
    assert calls, "the prefill did not go through the numpy path"
    assert [t for t, _ in ours] == [t for t, _ in reference]
    for (_, a), (_, b) in zip(ours, reference):
        np.testing.assert_allclose(a, b, atol=1e-4)
