"""The grammar stage of a decode step: the token masks of the constrained rows, computed on the
host while the model computes the step's logits, then applied to those logits on the device.

A row's mask for its next token depends only on the tokens it has so far, so it can be computed
beside the forward pass that produces that token's logits (as vLLM and SGLang do). The masks of
all constrained rows are filled by llguidance's executor in one call (its own threads, the GIL
released), as packed bitmasks, one int32 word per 32 tokens; the device unpacks them, so only
1/32 of a boolean mask crosses to it.
"""

from __future__ import annotations

import time
from typing import Optional

import numpy as np

from deployments.llm.constraints import TokenMask


class MaskStage:
    def __init__(self):
        self._executor = None
        self._columns: dict[int, tuple] = {}  # logits width -> (word index, bit, inside) per column

    def compute(self, masks: list[TokenMask], tokens: list[Optional[int]]) -> np.ndarray:
        """Each mask advanced by its row's newest token, then every next-token mask at once:
        [len(masks), words] packed bits (rows of masks that left their grammar allow only
        end-of-sequence)."""
        import llguidance

        t0, cpu0 = time.perf_counter(), time.thread_time()
        words = (max(m.width for m in masks) + 31) // 32
        bits = np.zeros((len(masks), words), dtype=np.int32)
        for mask, token in zip(masks, tokens):
            mask.advance(token)
        healthy = [(m.matcher, i) for i, m in enumerate(masks) if not m.error]
        if healthy:
            if self._executor is None:
                self._executor = llguidance.LLExecutor()
            self._executor.unsafe_compute_mask_ptr(healthy, bits.ctypes.data, words * 4, len(masks))
        for i, mask in enumerate(masks):
            if mask.error:
                mask.fill(bits, i)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        for mask in masks:  # one call for all: each row is charged its share
            mask.timed(seconds / len(masks), cpu / len(masks))
        return bits

    def apply(self, logits, rows: list[int], bits: np.ndarray, width: int):
        """`logits` ([B, V]) with what each masked row's bits forbid at -inf. Columns past the
        grammar's vocabulary (`width`: logits wider than the tokenizer) are never allowed."""
        import mlx.core as mx

        batch, columns = logits.shape
        full = np.full((batch, bits.shape[1]), -1, dtype=np.int32)
        full[rows] = bits
        word, bit, inside = self._layout(columns, bits.shape[1], width)
        allowed = (mx.take(mx.array(full), word, axis=1) >> bit) & 1
        constrained = np.zeros((batch, 1), dtype=bool)
        constrained[rows] = True
        allowed = (allowed != 0) & (inside | mx.array(~constrained))
        return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))

    def _layout(self, columns: int, words: int, width: int):
        import mlx.core as mx

        key = (columns, words, width)
        if key not in self._columns:
            index = np.arange(columns)
            self._columns[key] = (
                mx.array(np.minimum(index // 32, words - 1)),
                mx.array((index % 32).astype(np.int32)),
                mx.array(index < width)[None],
            )
        return self._columns[key]
