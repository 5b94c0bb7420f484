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
        self._inside_bits: dict[tuple, np.ndarray] = {}  # (words, width) -> the bits under width, per word

    def compute(
        self,
        masks: list[TokenMask],
        tokens: list[Optional[int]],
        drafts: Optional[list[list[int]]] = None,
        positions: int = 1,
    ) -> np.ndarray:
        """Each mask advanced by its row's newest token (None: already), then every next-token
        mask at once: [len(masks) * positions, words] packed bits, row m * positions + j the
        mask at position j of mask m's row (after its first j drafted tokens, which its matcher
        has validated; llguidance steps through them and back). Rows of masks that left their
        grammar allow only end-of-sequence."""
        import llguidance

        t0, cpu0 = time.perf_counter(), time.thread_time()
        words = (max(m.width for m in masks) + 31) // 32
        bits = np.full((len(masks) * positions, words), -1, dtype=np.int32)
        for mask, token in zip(masks, tokens):
            mask.advance(token)
        if self._executor is None:
            self._executor = llguidance.LLExecutor()
        healthy = [i for i, m in enumerate(masks) if not m.error]
        plain = [(masks[i].matcher, i * positions) for i in healthy if not drafts or not drafts[i]]
        drafted = [(masks[i].matcher, i * positions, drafts[i]) for i in healthy if drafts and drafts[i]]
        if plain:
            self._executor.unsafe_compute_mask_ptr(plain, bits.ctypes.data, words * 4, len(bits))
        if drafted:
            self._executor.unsafe_compute_mask_ptr_with_draft_token(drafted, bits.ctypes.data, words * 4, len(bits))
        for i, mask in enumerate(masks):
            if mask.error:
                for j in range(positions):
                    mask.fill(bits, i * positions + j)
        seconds, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        for mask in masks:  # one call for all: each row is charged its share
            mask.timed(seconds / len(masks), cpu / len(masks))
        return bits

    def apply(self, logits, rows: list[int], bits: np.ndarray, width: int):
        """`logits` ([B, V], or [B, P, V] with drafts) with what each masked row's bits forbid
        at -inf. Columns past the grammar's vocabulary (`width`: logits wider than the
        tokenizer) are never allowed.

        Each 32-bit word is shifted by 0..31 (a broadcast, no gather), and the logits are
        bounded by +inf where allowed and -inf where not: `minimum` keeps a logit or makes it
        -inf, the same values `where` gives, but on MLX's CPU backend a `where` over [16, 49152]
        took 3.2 ms and a `minimum` 0.2 ms, and the gather of a word per column 2.3 ms (the whole
        application 7.3 ms -> 1.1 ms; docs/performance.md section 14). A NaN logit stays NaN
        either way where allowed; where forbidden it stays NaN too (`where` made it -inf), and a
        token picked there is refused by the row's matcher (the request fails, it is never
        answered outside its grammar)."""
        import mlx.core as mx

        shape = logits.shape
        batch, columns = shape[0], shape[-1]
        positions = 1 if logits.ndim == 2 else shape[1]
        words = (columns + 31) // 32
        full = np.full((batch, positions, words), -1, dtype=np.int32)  # unconstrained rows: all
        given = bits.reshape(len(rows), positions, bits.shape[1])[..., :words]
        constrained = np.zeros((len(rows), positions, words), dtype=np.int32)  # past the grammar's words: none
        constrained[..., : given.shape[-1]] = given
        full[rows] = constrained & self._inside(words, width)
        count = batch * positions
        packed = mx.array(full.reshape(count, words))
        allowed = ((packed[:, :, None] >> mx.arange(32, dtype=mx.int32)) & 1).reshape(count, words * 32)
        bound = (allowed[:, :columns].astype(logits.dtype) * 2 - 1) * float("inf")  # 1 -> +inf, 0 -> -inf
        return mx.minimum(logits.reshape(count, columns), bound).reshape(shape)

    def _inside(self, words: int, width: int) -> np.ndarray:
        """[words] int32: the bits of the columns under `width` set."""
        key = (words, width)
        if key not in self._inside_bits:
            inside = np.zeros(words * 32, dtype=bool)
            inside[:width] = True
            self._inside_bits[key] = np.packbits(inside, bitorder="little").view(np.int32)
        return self._inside_bits[key]
