"""Draft proposals for speculative decoding. A drafter is a stage of the decode step
(deployments/llm/decode.py) with four calls: `join` (rows entered the batch), `propose` (each
row's guess of its next tokens, after its newest), `settle` (how many of each row's drafted
tokens the model kept) and `filter` (rows left). Two kinds: prompt lookup here, and a small
draft model (deployments/llm/draft_model.py).

Prompt lookup (n-gram matching): the tokens that followed the latest earlier occurrence of a
sequence's last n tokens, in its own context.

Agents and coding tools repeat what their context holds (a file rewritten with one change, a
JSON object echoed back): where the last few tokens occurred before, what followed them then is
a cheap guess of what follows now. The target model checks the guess in one step
(deployments/llm/speculation.py); a wrong guess costs part of a step, a right one saves steps.

`NgramIndex` keeps, per sequence, where each n-gram (n in [min_n, max_n]) last ended, updated
as tokens are committed, so a proposal is a few dictionary look-ups, not a scan of the context.
The longest n that matches wins (vLLM's and transformers' prompt lookup do the same).

Pure Python: no MLX, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class SpeculativeSettings:
    method: str = "ngram"  # ngram: prompt lookup; draft: a small model (draft_model)
    num_speculative_tokens: int = 4  # tokens proposed per step, at most
    prompt_lookup_min: int = 2  # ngram: the shortest suffix worth matching
    prompt_lookup_max: int = 4  # ngram: the longest suffix tried first
    draft_model: Optional[str] = None  # draft: the draft model's directory
    max_batch: Optional[int] = None  # drafting pauses while the batch holds this many rows or more


class NgramIndex:
    """One sequence's committed tokens and where each of their n-grams last ended."""

    def __init__(self, settings: SpeculativeSettings, tokens: list[int] = ()):
        self.settings = settings
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], int] = {}  # n-gram -> the index just past its latest end
        self._pending: list[tuple[tuple[int, ...], int]] = []  # the suffix n-grams, indexed once a token follows
        self.extend(tokens)

    def extend(self, tokens: list[int]) -> None:
        lo, hi = self.settings.prompt_lookup_min, self.settings.prompt_lookup_max
        for token in tokens:
            # The n-grams that ended at the previous token now have a follower: index them.
            for gram, end in self._pending:
                self._ends[gram] = end
            self.tokens.append(token)
            end = len(self.tokens)
            self._pending = [(tuple(self.tokens[end - n : end]), end) for n in range(lo, min(hi, end) + 1)]

    def propose(self, limit: int) -> list[int]:
        """Up to `limit` (and num_speculative_tokens) tokens that followed the latest earlier
        occurrence of the longest matching suffix; [] when none matches."""
        limit = min(limit, self.settings.num_speculative_tokens)
        if limit <= 0:
            return []
        for gram, _ in reversed(self._pending):  # longest first
            start = self._ends.get(gram)
            if start is not None:
                return self.tokens[start : start + limit]
        return []


class NgramDrafter:
    """Prompt lookup for every row of the batch: one index per row, of its committed tokens."""

    def __init__(self, settings: SpeculativeSettings):
        self.settings = settings
        self.max_batch = settings.max_batch
        self.indexes: list[NgramIndex] = []  # aligned with the decode batch's rows

    def reset(self) -> None:
        """Forget every row (drafting resumes with a join of the batch's rows)."""
        self.indexes = []

    def join(self, rows: list[Any]) -> None:
        """Rows whose token lists hold their prompt."""
        self.indexes += [NgramIndex(self.settings, row.tokens) for row in rows]

    def propose(self, rows: list[Any], newest: list[int], limits: list[int]) -> list[list[int]]:
        out = []
        for index, token, limit in zip(self.indexes, newest, limits):
            index.extend([token])
            out.append(index.propose(limit))
        return out

    def settle(self, rows: list[Any], kept: list[list[int]]) -> None:
        for index, tokens in zip(self.indexes, kept):
            index.extend(tokens)

    def filter(self, keep: list[int]) -> None:
        self.indexes = [self.indexes[i] for i in keep]
