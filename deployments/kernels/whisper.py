"""Whisper's attention and GELU on MLX's CPU backend, computed by numpy (never on Metal).

On MLX's CPU backend `exp` costs ~20 ns per element and `erf` ~40 (numpy's AVX-512 `exp` ~1.5),
and the system BLAS multiplies Whisper's (1500 x 64) head products at a fraction of numpy's
speed, so one Whisper tiny.en encode spends most of its time in the attention softmax and GELU
(docs/performance.md, "Profiles"). Options measured on one (1, 6, 1500, 64) self-attention,
process CPU ms: MLX's ops 371-485, `mx.fast.scaled_dot_product_attention` 486, row chunks of
MLX's ops 449, a polynomial `exp` from mul/add compiled with `mx.compile` 395 (MLX's fused CPU
kernels are not vectorized), numpy's softmax between MLX's matmuls 167-259, all of it in numpy
over blocks of 128 query rows (scores stay in cache) 58. That last one is used here:

- `attention(q, k, v)`: for each block of query rows, QK^T (numpy's BLAS), minus the row max,
  `exp` in place, times V, divided by the row sums (after the product: 64 values a row, not
  1500); the raw scores (mlx-audio returns them for alignment heads) stay a lazy MLX product
  that costs nothing unless read;
- `gelu(x)`: x * (1 + erf(x / sqrt 2)) / 2 (MLX's formula) with a vectorized erf in numpy over
  blocks that stay in cache: 11 ms of CPU for one MLP's 1500 x 1536 values, MLX 115, scipy's
  erf 50;

Only float32 inputs with at least `MIN_ELEMENTS` scores/values take these paths (the encoder;
a decode step's few rows stay in MLX, where the round trip would cost more), and only while
MLX's default device is the CPU. Results equal MLX's within float32 rounding
(tests/unit/kernels/test_whisper.py); transcripts are identical (bench/asr_peers.py checks).

- cross-attention K/V: split into heads, scaled and made contiguous once per decode, not per token;
- `Embedding.as_linear`: the decoder's logits for one row as numpy's gemv (6 ms vs 13.5 a token),
  and `Linear` likewise for a decode step's projections (0.14 ms vs 0.3 for 384 -> 1536).

`install()` puts them into mlx-audio's Whisper (process-wide: the attention method of its
MultiHeadAttention class, the `nn.gelu` its module calls and the `nn.Embedding` it builds; so
install before loading a model), `set_enabled(False)` (the ASR
slot's `cpu_kernels: false`) sends every call back to MLX's own ops, `uninstall()` restores
mlx-audio's code. No Ray.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Optional

import mlx.core as mx
import mlx.nn
import numpy as np

from deployments.kernels.conv import _on_cpu

logger = logging.getLogger(__name__)

MIN_ELEMENTS = 1 << 16  # below this, numpy's round trip costs more than MLX's slow op saves
ROW_BLOCK = 128  # query rows per block: 6 heads x 128 x 1500 scores = 4.6 MB (measured best of 64-1500)
_state: dict = {"enabled": True, "installed": None}
_LOCK = threading.Lock()


def set_enabled(enabled: bool) -> None:
    """Use the numpy paths (True, the default) or MLX's own ops (False), process-wide."""
    _state["enabled"] = bool(enabled)


def enabled() -> bool:
    return _state["enabled"]


def _fast_path(x: mx.array, elements: int, min_elements: Optional[int] = None) -> bool:
    threshold = MIN_ELEMENTS if min_elements is None else min_elements
    return _state["enabled"] and x.dtype == mx.float32 and elements >= threshold and _on_cpu(None)


def _numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q @ k) @ v over the last axis; q (..., L, D), k (..., D, S), v (..., S, D)."""
    out = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=np.float32)
    for start in range(0, q.shape[-2], ROW_BLOCK):
        rows = slice(start, start + ROW_BLOCK)
        scores = np.matmul(q[..., rows, :], k)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        block = np.matmul(scores, v)
        block /= scores.sum(axis=-1, keepdims=True)
        out[..., rows, :] = block
    return out


def attention(q: mx.array, k: mx.array, v: mx.array, min_elements: Optional[int] = None) -> mx.array:
    """`mx.softmax(q @ k, axis=-1, precise=True) @ v` for q (B, H, L, D), k (B, H, D, S) and
    v (B, H, S, D), already scaled; through numpy when the fast path applies (at least
    `min_elements` scores, default MIN_ELEMENTS)."""
    scores = q.shape[0] * q.shape[1] * q.shape[2] * k.shape[-1]
    if not _fast_path(q, scores, min_elements):
        return mx.softmax(q @ k, axis=-1, precise=True) @ v
    mx.eval(q, k, v)
    # k and v arrive transposed (head split): one contiguous copy, not one per row block.
    k_np, v_np = np.ascontiguousarray(np.asarray(k)), np.ascontiguousarray(np.asarray(v))
    return mx.array(_numpy_attention(np.asarray(q), k_np, v_np))


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-z^2), t = 1 / (1 + p z),
# for z >= 0 (odd symmetry for the rest); |error| <= 1.5e-7, within float32 rounding of MLX's
# own erf (both 4.6e-7 from a float64 GELU on N(0, 9) inputs).
_ERF_P = np.float32(0.3275911)
_ERF_A = tuple(np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
GELU_BLOCK = 1 << 16  # elements per block: the ~20 passes stay in cache (11 ms vs 26 unblocked)


def _numpy_gelu(x: np.ndarray) -> np.ndarray:
    flat = x.reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, GELU_BLOCK):
        xs, o = flat[start : start + GELU_BLOCK], out[start : start + GELU_BLOCK]
        z = np.abs(xs) * np.float32(1 / math.sqrt(2))
        t = z * _ERF_P
        t += 1
        np.reciprocal(t, out=t)
        poly = t * _ERF_A[0]
        for a in _ERF_A[1:]:
            poly += a
            poly *= t
        np.multiply(z, z, out=z)
        np.negative(z, out=z)
        np.exp(z, out=z)
        poly *= z
        np.subtract(1, poly, out=poly)
        np.copysign(poly, xs, out=o)  # erf(x / sqrt 2)
        o += 1
        o *= xs
        o *= 0.5
    return out.reshape(x.shape)


def gelu(x: mx.array) -> mx.array:
    """`mlx.nn.gelu(x)` (the erf form), computed by numpy when the fast path applies."""
    if not _fast_path(x, x.size):
        return mlx.nn.gelu(x)
    return mx.array(_numpy_gelu(np.asarray(x)))  # np.asarray evaluates x; read only


# Per attention module: (k, v, k split into heads and scaled, v split into heads), reused while
# the same k and v come back. A decode step's cross-attention gets the same cached encoder K/V
# every token, and mlx-audio re-splits and re-scales all 1500 of them each time, leaving them
# transposed (~2.3 ms a layer per token on the CPU; 0.35 ms prepared once and contiguous).
# Holding k keeps its id from being reused.
_prepared: dict[int, tuple] = {}


def _heads(self, k, v, scale):
    """k and v split into heads (k scaled), and whether they were prepared by an earlier call."""
    cached = _prepared.get(id(self))
    if _state["enabled"] and cached is not None and cached[0] is k and cached[1] is v:
        return cached[2], cached[3], True
    k_heads = k.reshape(*k.shape[:2], self.n_head, -1).transpose(0, 2, 3, 1) * scale
    v_heads = v.reshape(*v.shape[:2], self.n_head, -1).transpose(0, 2, 1, 3)
    if _state["enabled"]:
        # Contiguous: MLX's CPU matmul copies a transposed operand on every call (0.9 vs 0.07 ms
        # for a decode step's QK^T of one layer; 0.5 vs 0.07 for PV).
        k_heads, v_heads = mx.contiguous(k_heads), mx.contiguous(v_heads)
        _prepared[id(self)] = (k, v, k_heads, v_heads)
    return k_heads, v_heads, False


def qkv_attention(self, q, k, v, mask=None):
    """mlx-audio's `MultiHeadAttention.qkv_attention` (stt/models/whisper/whisper.py) with
    `attention` for the unmasked case and the head split of a repeated k/v reused; same inputs,
    outputs and arithmetic."""
    n_batch, n_ctx, n_state = q.shape
    scale = (n_state // self.n_head) ** -0.25
    q = q.reshape(*q.shape[:2], self.n_head, -1).transpose(0, 2, 1, 3) * scale
    k, v, reused = _heads(self, k, v, scale)
    qk = q @ k  # lazy: evaluated only where mlx-audio reads the scores (alignment heads)
    if mask is not None:
        qk = qk + mask[:n_ctx, :n_ctx]
        out = mx.softmax(qk, axis=-1, precise=True) @ v
    else:
        # Prepared K/V (a decode step's cross-attention) are contiguous and evaluated: numpy
        # reads them in place, and one row's attention takes 0.2 ms there, 0.8 in MLX's ops.
        out = attention(q, k, v, min_elements=0 if reused else None)
    return out.transpose(0, 2, 1, 3).reshape(n_batch, n_ctx, n_state), qk


class Embedding(mlx.nn.Embedding):
    """Whisper's token embedding, whose `as_linear` (the logits: one row times the 51864 x 384
    table) runs as numpy's matrix-vector product for a single row: MLX's CPU matmul takes
    13.5 ms for it, numpy's gemv 6 (it reads the 80 MB table once either way). More rows (a
    batch of windows) stay in MLX, whose GEMM is the faster one there."""

    def as_linear(self, x):
        if not (_state["enabled"] and x.dtype == mx.float32 and x.size == x.shape[-1] and _on_cpu(None)):
            return super().as_linear(x)
        mx.eval(x)
        table = np.asarray(self.weight)
        return mx.array(np.asarray(x).reshape(-1, table.shape[1]) @ table.T).reshape(*x.shape[:-1], -1)


def _one_row(x: mx.array) -> bool:
    return _state["enabled"] and x.dtype == mx.float32 and x.size == x.shape[-1] and _on_cpu(None)


class Linear(mlx.nn.Linear):
    """A decode step's projections (one row): numpy's gemv, ~2x MLX's one-row matmul here."""

    def __call__(self, x):
        if not _one_row(x):
            return super().__call__(x)
        mx.eval(x)
        y = np.asarray(x).reshape(1, -1) @ np.asarray(self.weight).T
        if "bias" in self:
            y += np.asarray(self.bias)
        return mx.array(y).reshape(*x.shape[:-1], -1)


class _WhisperNN:
    """What mlx-audio's whisper module sees as `nn`: mlx.nn, with `gelu`, `Embedding` and `Linear`
    from here (layers built while installed, i.e. a model loaded after `install()`, are these)."""

    gelu = staticmethod(gelu)
    Embedding = Embedding
    Linear = Linear

    def __getattr__(self, name):
        return getattr(mlx.nn, name)


def install() -> bool:
    """Route mlx-audio's Whisper attention and GELU through this module when MLX runs on its CPU
    backend. Idempotent and thread-safe; returns whether installed (never on Metal)."""
    from mlx_audio.stt.models.whisper import whisper

    with _LOCK:
        if _state["installed"] is not None:
            return True
        if mx.default_device().type != mx.DeviceType.cpu:
            return False
        _state["installed"] = (whisper.MultiHeadAttention.qkv_attention, whisper.nn)
        whisper.MultiHeadAttention.qkv_attention = qkv_attention
        whisper.nn = _WhisperNN()
        logger.info("MLX CPU backend: Whisper's attention and GELU run in numpy (deployments.kernels.whisper)")
        return True


def uninstall() -> None:
    """Put mlx-audio's own code back (tests and benchmarks compare both in one process)."""
    from mlx_audio.stt.models.whisper import whisper

    with _LOCK:
        if _state["installed"] is not None:
            whisper.MultiHeadAttention.qkv_attention, whisper.nn = _state["installed"]
            _state["installed"] = None
            _prepared.clear()
