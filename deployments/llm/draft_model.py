"""A small draft model for speculative decoding: it guesses each row's next k tokens greedily,
batched over the decode batch's rows, and the served model checks the guesses in one step
(deployments/llm/decode.py, speculation.py). A drafter stage (deployments/llm/drafts.py).

The draft keeps its own batch KV cache, aligned with the decode batch's rows, one step behind:
when a step begins, it holds every settled token of a row but the last two (p, the token before
the row's newest, and x, the newest), so every row's first draft pass runs exactly [p, x], with
no padding; passes 2..k run the previous pass's guess. After the verdict, a row that kept a of
its k guesses drops the last k - a positions (the guesses past the kept ones, and x when none
was kept), which leaves it, again, all but its last two settled tokens. A row joining the batch
prefills all of its prompt but its last token into the draft's cache.

The guesses are greedy: a point-mass proposal, which the verdict's rejection sampling keeps
exact for sampled rows too. MLX is imported where it is used; no Ray.
"""

from __future__ import annotations

from typing import Any, Optional

from deployments.llm.prefill import run_chunks
from deployments.llm.speculation import drop_last


class DraftModelDrafter:
    def __init__(self, model: Any, k: int, prefill_step: int = 512, max_batch: Optional[int] = None):
        self.model = model
        self.k = k
        self.prefill_step = prefill_step
        self.max_batch = max_batch  # drafting pauses while the batch holds this many rows or more
        self.cache: list[Any] = []
        self._guessed: list[int] = []  # per row: the guesses the last propose fed it (0: joined since)

    def reset(self) -> None:
        """Forget every row (drafting resumes with a join of the batch's rows: their prefill)."""
        self.cache, self._guessed = [], []

    def join(self, rows: list[Any]) -> None:
        """Rows whose token lists hold their prompt: all but its last token into fresh caches,
        appended to the draft's batch cache."""
        from mlx_lm.generate import _extend_cache, _merge_caches
        from mlx_lm.models.cache import make_prompt_cache

        cache = _merge_caches([make_prompt_cache(self.model) for _ in rows])
        run_chunks(self.model, cache, [list(row.tokens[:-1]) for row in rows], self.prefill_step)
        self.cache = _extend_cache(self.cache, cache)
        self._guessed += [0] * len(rows)

    def propose(self, rows: list[Any], newest: list[int], limits: list[int]) -> list[list[int]]:
        import mlx.core as mx

        inputs = mx.array([[row.tokens[-1], token] for row, token in zip(rows, newest)], dtype=mx.uint32)
        guesses = []
        for _ in range(self.k):
            logits = self.model(inputs, cache=self.cache)
            inputs = mx.argmax(logits[:, -1, :], axis=-1)[:, None]
            guesses.append(inputs)
        self._guessed = [self.k] * len(rows)
        drafted = mx.concatenate(guesses, axis=1).tolist()
        return [d[: max(limit, 0)] for d, limit in zip(drafted, limits)]

    def settle(self, rows: list[Any], kept: list[list[int]]) -> None:
        """Row i kept len(kept[i]) guesses: drop the draft's positions past them."""
        drop_last(self.cache, [g - len(tokens) if g else 0 for g, tokens in zip(self._guessed, kept)])
        self._guessed = [0] * len(self._guessed)

    def filter(self, keep: list[int]) -> None:
        self._guessed = [self._guessed[i] for i in keep]
        if not keep:
            self.cache = []
            return
        for c in self.cache:
            c.filter(keep)
