"""Whisper's CPU kernels (deployments/kernels/whisper.py) give MLX's own results, switch off,
and leave the transcript of real speech unchanged."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")

from deployments.kernels import whisper as kernels  # noqa: E402


def _close(got, ref, rtol=1e-5):
    assert got.shape == ref.shape and got.dtype == ref.dtype
    scale = max(1.0, float(mx.abs(ref).max()))
    assert float(mx.abs(got - ref).max()) <= rtol * scale


@pytest.fixture
def small_threshold(monkeypatch):
    """Small shapes take the fast path (the real threshold is sized for the encoder)."""
    monkeypatch.setattr(kernels, "MIN_ELEMENTS", 1)
    kernels.set_enabled(True)
    yield
    kernels.set_enabled(True)


def _heads(batch, heads, rows, keys, dim, seed):
    mx.random.seed(seed)
    q = mx.random.normal((batch, rows, heads, dim)).transpose(0, 2, 1, 3)  # transposed, like whisper's
    k = mx.random.normal((batch, keys, heads, dim)).transpose(0, 2, 3, 1)
    v = mx.random.normal((batch, keys, heads, dim)).transpose(0, 2, 1, 3)
    return q * 2, k, v  # scores spread wide enough that the row-max shift matters


@pytest.mark.parametrize("batch,heads,rows,keys", [(1, 6, 300, 1500), (2, 3, 129, 77), (3, 2, 1, 40)])
def test_attention_matches_mlx_softmax(small_threshold, batch, heads, rows, keys):
    """Row blocks (129 rows: one block of ROW_BLOCK and a partial one), batches, a single row."""
    q, k, v = _heads(batch, heads, rows, keys, 16, seed=rows + keys)
    ref = mx.softmax(q @ k, axis=-1, precise=True) @ v
    _close(kernels.attention(q, k, v), ref)


def test_disabled_or_small_is_exactly_mlx(small_threshold, monkeypatch):
    q, k, v = _heads(1, 2, 8, 20, 8, seed=1)
    ref = mx.softmax(q @ k, axis=-1, precise=True) @ v
    kernels.set_enabled(False)
    assert mx.array_equal(kernels.attention(q, k, v), ref)
    kernels.set_enabled(True)
    monkeypatch.setattr(kernels, "MIN_ELEMENTS", 10**9)
    assert mx.array_equal(kernels.attention(q, k, v), ref)
    assert mx.array_equal(kernels.gelu(q), nn.gelu(q))


def test_float16_stays_in_mlx(small_threshold):
    q, k, v = (t.astype(mx.float16) for t in _heads(1, 2, 8, 20, 8, seed=2))
    assert mx.array_equal(kernels.attention(q, k, v), mx.softmax(q @ k, axis=-1, precise=True) @ v)


def test_gelu_matches_mlx(small_threshold, monkeypatch):
    monkeypatch.setattr(kernels, "GELU_BLOCK", 1000)  # several blocks and a partial one
    x = mx.concatenate([mx.linspace(-12, 12, 5000), mx.random.normal((3000,)) * 3]).reshape(2, 4, -1)
    _close(kernels.gelu(x), nn.gelu(x), rtol=2e-6)


def test_logits_row_matches_mlx(small_threshold):
    emb = kernels.Embedding(300, 24)
    plain = nn.Embedding(300, 24)
    plain.weight = emb.weight
    one, batch = mx.random.normal((1, 1, 24)), mx.random.normal((4, 1, 24))
    _close(emb.as_linear(one), plain.as_linear(one))
    assert mx.array_equal(emb.as_linear(batch), plain.as_linear(batch))  # several rows: MLX's GEMM


@pytest.mark.parametrize("bias", [True, False])
def test_one_row_projection_matches_mlx(small_threshold, bias):
    fast, plain = kernels.Linear(24, 40, bias=bias), nn.Linear(24, 40, bias=bias)
    plain.update(fast.parameters())
    one, rows = mx.random.normal((1, 1, 24)), mx.random.normal((3, 2, 24))
    _close(fast(one), plain(one))
    assert mx.array_equal(fast(rows), plain(rows))  # several rows: MLX's GEMM


def _attention_module(seed):
    from mlx_audio.stt.models.whisper.whisper import MultiHeadAttention

    mx.random.seed(seed)
    module = MultiHeadAttention(32, 4)
    mx.eval(module.parameters())
    return module


def test_qkv_attention_matches_mlx_audio(small_threshold):
    """Encoder self-attention (no mask), decoder self-attention (causal mask) and cross-attention
    with the same cached k/v over several steps (the prepared heads are reused): same output and
    same raw scores as mlx-audio's method."""
    from mlx_audio.stt.models.whisper.whisper import MultiHeadAttention

    original = MultiHeadAttention.qkv_attention
    module = _attention_module(0)
    x = mx.random.normal((2, 40, 32))
    mask = nn.MultiHeadAttention.create_additive_causal_mask(40)
    for args in ((x, x, x), (x, x, x, mask)):
        out, qk = kernels.qkv_attention(module, *args)
        ref_out, ref_qk = original(module, *args)
        _close(out, ref_out)
        assert mx.array_equal(qk, ref_qk)
    k, v = mx.random.normal((2, 50, 32)), mx.random.normal((2, 50, 32))
    for _ in range(3):
        q = mx.random.normal((2, 1, 32))
        out, qk = kernels.qkv_attention(module, q, k, v)
        ref_out, ref_qk = original(module, q, k, v)
        _close(out, ref_out)
        _close(qk, ref_qk)
        assert kernels._prepared[id(module)][0] is k  # the same cached k: prepared once
    k2 = k + 1  # a new k (the next window) is prepared again, not served stale
    out, _ = kernels.qkv_attention(module, q, k2, v)
    _close(out, original(module, q, k2, v)[0])


def test_install_routes_whisper_and_uninstall_restores():
    from mlx_audio.stt.models.whisper import whisper

    assert mx.default_device().type == mx.DeviceType.cpu  # the Linux CI backend
    # An engine loaded by an earlier test in this process may have installed them already.
    installed_already = whisper.MultiHeadAttention.qkv_attention is kernels.qkv_attention
    kernels.uninstall()
    before = (whisper.MultiHeadAttention.qkv_attention, whisper.nn)
    try:
        assert kernels.install() and kernels.install()  # idempotent
        assert whisper.MultiHeadAttention.qkv_attention is kernels.qkv_attention
        assert whisper.nn.gelu is kernels.gelu and whisper.nn.Embedding is kernels.Embedding
        assert whisper.nn.LayerNorm is nn.LayerNorm  # everything else is mlx.nn's
    finally:
        kernels.uninstall()
    assert (whisper.MultiHeadAttention.qkv_attention, whisper.nn) == before
    if installed_already:
        kernels.install()


def test_real_speech_transcript_identical_with_and_without(cache_dir):
    """Whisper tiny.en on espeak-ng speech: the same tokens with the kernels on and off."""
    from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en
    from tests.speech import speak

    audio = speak("Turn left at the next traffic light and the station is on your right.")
    engine = ASREngine(WHISPER_TINY_EN_ID, ensure_whisper_tiny_en(cache_dir), EngineConfig(cpu_kernels=True))
    try:
        engine._load()
        assert engine._model.decoder.token_embedding.__class__ is kernels.Embedding
        with_kernels = engine._transcribe([audio], TranscribeOptions())[0]
        kernels.set_enabled(False)
        without = engine._transcribe([audio], TranscribeOptions())[0]
    finally:
        kernels.set_enabled(True)
        kernels.uninstall()
    assert "traffic light" in with_kernels.text.lower()
    assert [s.tokens for s in with_kernels.segments] == [s.tokens for s in without.segments]
