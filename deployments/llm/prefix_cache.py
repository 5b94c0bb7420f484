"""The prompt (prefix) cache: a request whose prompt starts like an earlier one skips the prefill
of what they share (a common system prompt, the history of a multi-turn chat).

It keeps the KV caches of finished prompts in mlx-lm's `LRUPromptCache` (a token trie with
least-recently-used eviction by count and bytes), the way `mlx_lm.server` does, at three points:
- the end of the system prompt (shared by every conversation that uses it),
- the end of the prompt but its last token (the whole history, for the next turn),
- the end of a generation (the history plus the answer: what the next turn's prompt starts with).

Used by the engine thread only (no locking). Plans are plain data so the logic is testable
without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SYSTEM, HISTORY, ANSWER = "system", "user", "assistant"  # mlx-lm's names for the three kinds


@dataclass
class PrefillPlan:
    """How a prompt goes into the batch: a reused cache and what is left to prefill."""

    cache: Optional[list[Any]]  # the KV cache of `tokens[:cached]`, or None
    cached: int
    segments: list[list[int]]  # what is left, split where a cache is worth keeping
    # The kind of cache to keep at each segment end but the last, in order.
    keep_at_ends: list[str] = field(default_factory=list)


def plan_segments(tokens: list[int], cached: int, system_end: int) -> tuple[list[list[int]], list[str]]:
    """Split `tokens[cached:]` at the end of the system prompt and before the last token.

    BatchGenerator stops at every segment end (it also splits off the last token itself), and
    the engine keeps the cache there."""
    segments, keep = [], []
    if cached < system_end < len(tokens) - 1:
        segments.append(tokens[cached:system_end])
        keep.append(SYSTEM)
        cached = system_end
    if len(tokens) - cached > 1:
        keep.append(HISTORY)  # the generator's own split before the last token
    segments.append(tokens[cached:])
    return segments, keep


class PrefixCache:
    def __init__(self, model_key: str, max_entries: int, max_bytes: int):
        from mlx_lm.models.cache import LRUPromptCache

        self.model_key = model_key
        self._lru = LRUPromptCache(max_size=max_entries, max_bytes=max_bytes)
        self.hits = 0
        self.cached_tokens = 0

    def plan(self, tokens: list[int], system_end: int = 0) -> PrefillPlan:
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        cache, rest = self._lru.fetch_nearest_cache(self.model_key, tokens)
        if cache is not None and not rest:
            # The whole prompt is cached: the last token still has to run to give the logits.
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                rest = tokens[-1:]
            else:
                cache, rest = None, tokens
        cached = len(tokens) - len(rest) if cache is not None else 0
        if cached:
            self.hits += 1
            self.cached_tokens += cached
        segments, keep = plan_segments(tokens, cached, system_end)
        return PrefillPlan(cache if cached else None, cached, segments, keep)

    def keep(self, tokens: list[int], cache: list[Any], kind: str) -> None:
        if tokens:
            self._lru.insert_cache(self.model_key, list(tokens), cache, cache_type=kind)

    def trim_to(self, max_bytes: int) -> None:
        self._lru.trim_to(n_bytes=max_bytes)

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self._lru),
            "bytes": self._lru.nbytes,
            "hits": self.hits,
            "cached_tokens": self.cached_tokens,
        }
