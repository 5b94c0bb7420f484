"""mlx-lm's attention during a prompt's prefill on MLX's CPU backend, computed by numpy.

A prefill's attention is (heads x prompt rows x keys) scores, each through `exp`: MLX's CPU
`exp` costs ~13 ns an element (a scalar loop), numpy's AVX-512 one ~1. Measured on the 2-core
box with the benchmark Qwen3 (10 heads, 2 KV heads, head dim 64): one layer's
`mx.fast.scaled_dot_product_attention` over a 2048-row chunk of a 2347-token prompt took 836 ms,
645 of them the softmax's `exp`, against 31 ms for one of its MLP's products; attention was
~85 % of the prompt's 11.8 s prefill (docs/performance.md, "Profiles"). Here, per sequence and
block of query rows: the scores (numpy's BLAS), the mask, minus the row max, `exp` in place,
times V, divided by the row sums after the product. A block reads only the keys its rows may
see (a causal mask, "causal" or a batched prefill's boolean one), so the masked upper triangle
is never computed.

- GQA: the query heads of one KV head are multiplied against it together (no repeated K/V).
- Masks: None, "causal" (aligned to the end, as MLX: row i sees keys up to S - N + i), a
  boolean array (True: attend) or an additive one, broadcast as MLX does. A boolean row masked
  everywhere averages V, as MLX's kernel does (the left padding of a batched prefill).
- Decode steps (one query row), quantized KV caches, attention sinks, other dtypes, Metal: mlx-lm's
  own `scaled_dot_product_attention`.

`install()` replaces mlx-lm's function in `mlx_lm.models.base` and in every model module that
imported it (each does `from .base import scaled_dot_product_attention`); models imported later
get it from base. Checked against MLX's kernel in tests/unit/kernels/test_llm_attention.py.
No Ray here.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Optional

import mlx.core as mx
import numpy as np

from deployments.kernels.conv import _on_cpu

logger = logging.getLogger(__name__)

MIN_SCORES = 1 << 16  # below this (a short prompt), numpy's round trip costs more than it saves
ROW_BLOCK = 128  # query rows per block: 10 heads x 128 x 2347 keys = 12 MB of scores
_MASKED = np.finfo(np.float32).min  # a boolean mask's "no": finite, so a row masked everywhere averages V
_state: dict = {"original": None}
_LOCK = threading.Lock()


def applies(queries: mx.array, keys: mx.array, cache: Any, sinks: Any) -> bool:
    """Whether the numpy path computes this call: a float32 prefill on the CPU backend."""
    rows, heads, length = queries.shape[2], queries.shape[1], keys.shape[2]
    return (
        rows > 1
        and sinks is None
        and not hasattr(cache, "bits")
        and queries.dtype == keys.dtype == mx.float32
        and queries.shape[0] * heads * rows * length >= MIN_SCORES
        and _on_cpu(None)
    )


def _mask_5d(mask: np.ndarray, heads: int, kv_heads: int) -> np.ndarray:
    """An MLX-broadcastable mask as (B', KV heads', group', N, S) for the grouped scores."""
    while mask.ndim < 4:
        mask = mask[None]
    batch, mask_heads = mask.shape[0], mask.shape[1]
    if mask_heads == 1:
        return mask.reshape(batch, 1, 1, *mask.shape[2:])
    return mask.reshape(batch, kv_heads, heads // kv_heads, *mask.shape[2:])


def _last_seen(block: np.ndarray) -> int:
    """How many leading keys a block of rows may see: past the last one a boolean mask keeps
    (a batched prefill's causal mask hides the rest), every key (an additive mask, a row masked
    everywhere, which MLX averages over all keys)."""
    if block.dtype != np.bool_:
        return block.shape[-1]
    rows = block.reshape(-1, block.shape[-1])
    if not rows.any(axis=1).all():
        return block.shape[-1]
    return int(np.flatnonzero(rows.any(axis=0))[-1]) + 1


def numpy_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: Optional[object]) -> np.ndarray:
    """softmax(scale q k^T + mask) v for q (B, H, N, D), k and v (B, KV heads, S, D); mask None,
    "causal" or an array (see the module's notes). Returns (B, H, N, D_v) float32."""
    batch, heads, rows, depth = q.shape
    kv_heads, length = k.shape[1], k.shape[2]
    group = heads // kv_heads
    grouped = (q * np.float32(scale)).reshape(batch, kv_heads, group, rows, depth)
    causal = isinstance(mask, str)
    array_mask = None if causal or mask is None else _mask_5d(np.asarray(mask), heads, kv_heads)
    offset = length - rows  # a causal row i sees keys up to offset + i
    out = np.empty((batch, kv_heads, group, rows, v.shape[-1]), dtype=np.float32)
    for b in range(batch):
        keys_t = np.ascontiguousarray(k[b].transpose(0, 2, 1))[:, None]  # (KV, 1, D, S)
        values = np.ascontiguousarray(v[b])[:, None]  # (KV, 1, S, D_v)
        for start in range(0, rows, ROW_BLOCK):
            stop = min(rows, start + ROW_BLOCK)
            cols = offset + stop if causal else length
            block = None
            if array_mask is not None:
                block = array_mask[min(b, array_mask.shape[0] - 1), ..., start:stop, :]
                cols = _last_seen(block)
                block = block[..., :cols]
            scores = np.matmul(grouped[b, :, :, start:stop], keys_t[..., :cols])  # (KV, G, r, cols)
            if causal:
                seen = np.arange(cols)[None, :] <= offset + np.arange(start, stop)[:, None]
                scores[..., ~seen] = -np.inf  # every row sees key 0: never a row of -inf
            elif block is not None and block.dtype == np.bool_:
                np.copyto(scores, _MASKED, where=~block)
            elif block is not None:
                scores += block.astype(np.float32)
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            result = np.matmul(scores, values[..., :cols, :])
            result /= scores.sum(axis=-1, keepdims=True)
            out[b, :, :, start:stop] = result
    return out.reshape(batch, heads, rows, v.shape[-1])


def scaled_dot_product_attention(queries, keys, values, cache, scale: float, mask, sinks=None) -> mx.array:
    """mlx-lm's `scaled_dot_product_attention`, through numpy where `applies` says so."""
    if not applies(queries, keys, cache, sinks):
        return _original()(queries, keys, values, cache=cache, scale=scale, mask=mask, sinks=sinks)
    arrays = [queries, keys, values] + ([mask] if isinstance(mask, mx.array) else [])
    mx.eval(*arrays)
    host_mask = np.asarray(mask) if isinstance(mask, mx.array) else mask
    out = numpy_attention(np.asarray(queries), np.asarray(keys), np.asarray(values), scale, host_mask)
    return mx.array(out)


def _original():
    """mlx-lm's own function (what install() replaced, or base's when not installed)."""
    if _state["original"] is not None:
        return _state["original"]
    from mlx_lm.models import base

    return base.scaled_dot_product_attention


def _model_modules() -> list:
    return [m for name, m in list(sys.modules.items()) if name.startswith("mlx_lm.models.") and m is not None]


def install() -> bool:
    """Route mlx-lm's attention through this module on MLX's CPU backend (never on Metal).
    Idempotent and thread-safe; returns whether installed."""
    from mlx_lm.models import base

    with _LOCK:
        if _state["original"] is not None:
            return True
        if mx.default_device().type != mx.DeviceType.cpu:
            return False
        original = base.scaled_dot_product_attention
        _state["original"] = original
        for module in _model_modules():
            if getattr(module, "scaled_dot_product_attention", None) is original:
                module.scaled_dot_product_attention = scaled_dot_product_attention
        logger.info("MLX CPU backend: mlx-lm's prefill attention runs in numpy (deployments.kernels.llm_attention)")
        return True


def uninstall() -> None:
    """Put mlx-lm's own function back (tests and benchmarks compare both in one process)."""
    with _LOCK:
        original, _state["original"] = _state["original"], None
        if original is None:
            return
        for module in _model_modules():
            if getattr(module, "scaled_dot_product_attention", None) is scaled_dot_product_attention:
                module.scaled_dot_product_attention = original
