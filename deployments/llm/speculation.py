"""Verifying drafted tokens inside the decode batch: each row ran its newest token and up to k
drafted ones in one forward pass; here each row keeps the longest prefix of its draft the target
model accepts, plus one token of the target's own.

Greedy rows accept a drafted token when it is the argmax at its position, so their output is
token for token what decoding without drafts gives. Sampling rows use rejection sampling with
the draft as a point mass q = δ(draft): a drafted token x is accepted with probability p(x)
(the row's filtered, tempered distribution at that position); at the first rejection the token
comes from p with x removed and renormalised, which is (p - q)+ normalised; with every draft
accepted, the next token comes from the last position's p. The output's distribution is
exactly the target's (Leviathan et al., 2023; Chen et al., 2023). A seeded row draws its
uniforms and its token from its own key.

MLX is imported where it is used; no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.llm.sampler import RowSampler


@dataclass
class Verdict:
    """Per row, on the device until the next step reads it: how many drafted tokens it kept
    (`accepted`, [B]) and the token of its own that follows them (`token`, [B])."""

    accepted: Any
    token: Any


def verify(samplers: list[RowSampler], logits, logprobs, drafts, lengths) -> Verdict:
    """`logits`, `logprobs`: [B, K+1, V] (the processed, masked rows); `drafts`: [B, K] int
    (padding past each row's `lengths[b]` drafted tokens is never accepted)."""
    import mlx.core as mx

    batch, positions, _ = logits.shape
    k = positions - 1
    accepted = mx.zeros((batch,), dtype=mx.int32)
    token = mx.zeros((batch,), dtype=mx.uint32)
    groups: dict[bool, list[int]] = {}
    for i, sampler in enumerate(samplers):
        groups.setdefault(sampler.greedy, []).append(i)
    index = mx.arange(k)[None, :]
    valid = index < mx.array(lengths)[:, None]  # [B, K]
    for greedy, rows in groups.items():
        sel = mx.array(rows)
        if greedy:
            targets = mx.argmax(logits[sel], axis=-1)  # [b, K+1]
            ok = (targets[:, :k] == drafts[sel]) & valid[sel]
            n = _leading(ok)
            pick = mx.take_along_axis(targets, n[:, None], axis=1)[:, 0]
        else:
            n, pick = _rejection_sample([samplers[i] for i in rows], logprobs[sel], drafts[sel], valid[sel])
        accepted[sel] = n
        token[sel] = pick.astype(mx.uint32)
    return Verdict(accepted, token)


def drop_last(cache: list[Any], counts: list[int]) -> None:
    """Drop the last `counts[i]` positions of row i from a batch KV cache (every layer's
    BatchKVCache). What all rows drop is trimmed off the end; the rest, per row, rolled out
    into its left padding (as mlx-lm's BatchKVCache finishes a right-padded prefill), so the
    rows stay aligned on one write index."""
    import mlx.core as mx
    from mlx_lm.models.cache import dynamic_roll

    if not counts or not any(counts):
        return
    common = min(counts)
    for c in cache:
        c.trim(common)
    shifts = [n - common for n in counts]
    if not any(shifts):
        return
    shift = mx.array(shifts)
    for c in cache:
        c.keys = dynamic_roll(c.keys, shift[:, None], axis=2)
        c.values = dynamic_roll(c.values, shift[:, None], axis=2)
        c.offset = c.offset - shift
        c.left_padding = c.left_padding + shift


def _leading(ok):
    """The count of leading True values per row."""
    import mlx.core as mx

    return mx.sum(mx.cumprod(ok.astype(mx.int32), axis=1), axis=1)


def _rejection_sample(samplers: list[RowSampler], logprobs, drafts, valid):
    import mlx.core as mx

    rows, positions, width = logprobs.shape
    k = positions - 1
    p = mx.stack(
        [mx.softmax(s.filtered(logprobs[r]) * (1.0 / s.temperature), axis=-1) for r, s in enumerate(samplers)]
    )  # [r, K+1, V]
    u = _uniforms([s.next_key() if s.seeded else None for s in samplers], k)  # [r, K]
    p_draft = mx.take_along_axis(p[:, :k, :], drafts[..., None].astype(mx.int32), axis=-1)[..., 0]
    n = _leading((u < p_draft) & valid)
    # The next token's distribution: p at position n, without the draft rejected there.
    at = mx.take_along_axis(p, n[:, None, None], axis=1)[:, 0, :]  # [r, V]
    rejected = n < mx.sum(valid.astype(mx.int32), axis=1)
    padded = mx.concatenate([drafts, drafts[:, :1]], axis=1)
    draft_at = mx.take_along_axis(padded, n[:, None], axis=1)[:, 0]
    drop = (mx.arange(width)[None, :] == draft_at[:, None]) & rejected[:, None]
    log_residual = mx.log(mx.where(drop, 0.0, at))
    return n, _categorical(log_residual, [s.next_key() if s.seeded else None for s in samplers])


def _uniforms(keys: list, k: int):
    """[rows, k] uniforms: a seeded row's from its own key, the others' from the global state."""
    import mlx.core as mx

    if all(key is None for key in keys):
        return mx.random.uniform(shape=(len(keys), k))
    return mx.stack([mx.random.uniform(shape=(k,), key=key) for key in keys])


def _categorical(log_p, keys: list):
    import mlx.core as mx

    if all(key is None for key in keys):
        return mx.random.categorical(log_p)
    return mx.concatenate([mx.random.categorical(log_p[r : r + 1], key=key) for r, key in enumerate(keys)])
