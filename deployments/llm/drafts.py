"""Draft proposals for speculative decoding by prompt lookup (n-gram matching): the tokens that
followed the latest earlier occurrence of a sequence's last n tokens, in its own context.

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


@dataclass(frozen=True)
class NgramSettings:
    num_speculative_tokens: int = 4  # tokens proposed per step, at most
    prompt_lookup_min: int = 2  # the shortest suffix worth matching
    prompt_lookup_max: int = 4  # the longest suffix tried first


class NgramIndex:
    """One sequence's committed tokens and where each of their n-grams last ended."""

    def __init__(self, settings: NgramSettings, tokens: list[int] = ()):
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
