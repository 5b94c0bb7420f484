"""How each row of the decode batch picks its next token from the logits: greedy, or sampled
with temperature, top-p, min-p and top-k, from the global random state or from the row's own
seeded key; and the distribution a pick comes from, which speculative verification needs.

One `RowSampler` per sequence (made from its `SamplingParams`); `pick` selects the tokens of a
whole batch with as few calls as the rows allow: every greedy row in one argmax, the unseeded
sampled rows that share their settings in one categorical draw, a seeded row alone with its own
key (a seed must give the same answer whatever else is in the batch). The filters are mlx-lm's
(`mlx_lm.sample_utils`), so a row samples exactly what `make_sampler` would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.generation.sampling import SamplingParams


@dataclass(eq=False)
class RowSampler:
    temperature: float = 0.0
    top_p: float = 1.0
    min_p: float = 0.0
    top_k: int = 0
    seed: Optional[int] = None
    choice: int = 0  # choice i > 0 of a seeded request draws from its own key, split off the seed's
    _key: Any = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, params: SamplingParams, choice: int = 0) -> RowSampler:
        return cls(params.temperature, params.top_p, params.min_p, params.top_k, params.seed, choice)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def seeded(self) -> bool:
        return not self.greedy and self.seed is not None

    @property
    def group(self) -> tuple:
        """Rows with equal groups sample in one call (greedy rows all share one)."""
        if self.greedy:
            return ("greedy",)
        if self.seeded:
            return ("seeded", id(self))
        return ("sampled", self.temperature, self.top_p, self.min_p, self.top_k)

    def filtered(self, logprobs):
        """`logprobs` with what top-p, min-p and top-k leave out at -inf (mlx-lm's order)."""
        from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p

        if 0 < self.top_p < 1.0:
            logprobs = apply_top_p(logprobs, self.top_p)
        if self.min_p:
            logprobs = apply_min_p(logprobs, self.min_p)
        if self.top_k:
            logprobs = apply_top_k(logprobs, self.top_k)
        return logprobs

    def next_key(self):
        """The row's key for one draw (seeded rows only): split afresh at every draw."""
        import mlx.core as mx

        if self._key is None:
            seed_key = mx.random.key(self.seed % 2**64)  # a negative seed wraps, as OpenAI takes int64
            self._key = seed_key if self.choice == 0 else mx.random.split(seed_key, self.choice + 1)[self.choice]
        self._key, sub = mx.random.split(self._key)
        return sub


def pick(samplers: list[RowSampler], logits, logprobs=None):
    """One token per row of `logits` ([B, V]). `logprobs` (the same rows normalised) is only
    needed when some row samples; it is computed here if not given."""
    import mlx.core as mx

    groups: dict[tuple, list[int]] = {}
    for i, sampler in enumerate(samplers):
        groups.setdefault(sampler.group, []).append(i)
    if len(groups) == 1 and ("greedy",) in groups:
        return mx.argmax(logits, axis=-1)
    if logprobs is None and any(key[0] != "greedy" for key in groups):
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    order, parts = [], []
    for key, rows in groups.items():
        index = mx.array(rows) if len(rows) < len(samplers) else None
        part = logits if index is None else logits[index]
        if key[0] == "greedy":
            parts.append(mx.argmax(part, axis=-1))
        else:
            sampler = samplers[rows[0]]
            lp = sampler.filtered(logprobs if index is None else logprobs[index])
            draw_key = sampler.next_key() if sampler.seeded else None
            parts.append(mx.random.categorical(lp * (1.0 / sampler.temperature), key=draw_key))
        order += rows
    tokens = mx.concatenate(parts) if len(parts) > 1 else parts[0]
    if order == list(range(len(samplers))):
        return tokens
    inverse = [0] * len(order)
    for position, row in enumerate(order):
        inverse[row] = position
    return tokens[mx.array(inverse)]
