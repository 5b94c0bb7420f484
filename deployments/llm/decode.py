"""The decode step: the sequences past their prompt, one forward pass of the model for all of
them per step, one new token each.

A step is a short pipeline of stages:

    forward   the model on each row's newest token (dispatched, not waited for)
    report    the previous step's picks read back to the host: the tokens, which rows finished
              (end-of-sequence, a stop sequence, max_tokens), their log-probabilities
    select    the logits processors, the grammar masks (deployments/llm/masks.py: computed on the
              host while the forward runs), then each row's pick (deployments/llm/sampler.py)

The step runs one ahead, as mlx-lm's generator does: step t+1's forward is dispatched before
the host reads step t's picks, so the engine's own per-token work (detokenizing, parsing,
sending) runs while the model computes. A row that finishes has therefore run one forward past
its end; its cache, as extracted, holds that last token, and so does its token list.

Ray-free; MLX is imported where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.llm.constraints import TokenMask
from deployments.llm.masks import MaskStage
from deployments.llm.sampler import RowSampler, pick


@dataclass(eq=False)
class Row:
    """One sequence's place in the batch."""

    uid: int
    tokens: list[int]  # what its KV cache holds, in order
    max_tokens: int
    sampler: RowSampler
    processors: tuple = ()
    stop: Any = None  # a StopSequences matcher: end-of-sequence tokens and token stop sequences
    mask: Optional[TokenMask] = None
    logprobs: bool = False  # report each pick's log-probabilities (the processed, masked row)
    generated: int = 0
    context: Any = None  # the tokens so far as an MLX buffer, for the processors (made on first use)


@dataclass
class TokenEvent:
    """One generated token of one row. A finished row's event carries its KV cache and the
    tokens that cache holds (for the prompt cache)."""

    uid: int
    token: int
    logprobs: Any  # the [V] log-probabilities it was picked from, or None when not asked for
    finish_reason: Optional[str] = None
    prompt_cache: Optional[list[Any]] = None
    all_tokens: Optional[list[int]] = None


@dataclass
class _Picks:
    """A step's selection, still on the device until the next step reports it."""

    tokens: Any  # [B]
    logprobs: dict[int, Any] = field(default_factory=dict)  # row -> [V], for the rows that asked


class Decode:
    def __init__(self, model: Any, masks: Optional[MaskStage] = None, mask_width: Optional[int] = None):
        self.model = model
        self.rows: list[Row] = []
        self.cache: list[Any] = []
        self._inputs = None  # [B]: each row's newest pick, not yet run nor reported
        self._picks: Optional[_Picks] = None
        self._masks = masks or MaskStage()
        self._mask_width = mask_width

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ membership

    def extend(self, rows: list[Row], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose caches hold all of their prompt but its last token. Their first step runs
        at once, on its own (as mlx-lm's generator starts a sequence), so that their first
        token is reported by the next step of the whole batch."""
        import mlx.core as mx
        from mlx_lm.generate import _extend_cache

        inputs = mx.array(last_tokens, dtype=mx.uint32)
        logits = self.model(inputs[:, None], cache=cache)[:, -1, :]
        picks = self._select(rows, logits, inputs, [None] * len(rows))
        for row, token in zip(rows, last_tokens):
            row.tokens.append(token)
        mx.async_eval(picks.tokens, *picks.logprobs.values())
        offset = len(self.rows)
        self.cache = _extend_cache(self.cache, cache)
        self._inputs = picks.tokens if self._inputs is None else mx.concatenate([self._inputs, picks.tokens])
        self.rows += rows
        if self._picks is None:
            self._picks = _Picks(None)
        self._picks.logprobs.update({offset + i: lp for i, lp in picks.logprobs.items()})

    def filter(self, keep: list[int]) -> None:
        import mlx.core as mx

        self.rows = [self.rows[i] for i in keep]
        if not keep:
            self.cache, self._inputs, self._picks = [], None, None
            return
        for c in self.cache:
            c.filter(keep)
        index = mx.array(keep)
        self._inputs = self._inputs[index]
        if self._picks is not None:
            where = {old: new for new, old in enumerate(keep)}
            self._picks.logprobs = {where[i]: lp for i, lp in self._picks.logprobs.items() if i in where}

    def extract_cache(self, i: int) -> list[Any]:
        return [c.extract(i) for c in self.cache]

    # ------------------------------------------------------------------ the step

    def step(self) -> list[TokenEvent]:
        import mlx.core as mx

        if not self.rows:
            return []
        inputs = self._inputs
        logits = self.model(inputs[:, None], cache=self.cache)[:, -1, :]
        mx.async_eval(logits)
        fed = inputs.tolist()  # waits for the previous step's sampling, not for this forward
        picks = self._select(self.rows, logits, inputs, fed)
        events, finished = self._report(fed)
        self._inputs, self._picks = picks.tokens, picks
        mx.async_eval(picks.tokens, *picks.logprobs.values())
        if finished:
            self.filter([i for i in range(len(self.rows)) if i not in finished])
        return events

    def _report(self, fed: list[int]) -> tuple[list[TokenEvent], set[int]]:
        """Each row's newest pick, now run, joins its tokens and becomes its event."""
        events, finished = [], set()
        logprobs = self._picks.logprobs if self._picks is not None else {}
        for i, (row, token) in enumerate(zip(self.rows, fed)):
            row.tokens.append(token)
            row.generated += 1
            reason = "length" if row.generated >= row.max_tokens else None
            if row.stop is not None and row.stop.advance(token):
                reason = "stop"
            event = TokenEvent(row.uid, token, logprobs.get(i), reason)
            if reason is not None:
                finished.add(i)
                event.prompt_cache, event.all_tokens = self.extract_cache(i), row.tokens
            events.append(event)
        return events, finished

    def _select(self, rows: list[Row], logits, inputs, fed: list[Optional[int]]) -> _Picks:
        """Each row's pick from its logits; `fed`: the pick each row just ran (None for a
        row's first step), which its grammar mask consumes."""
        import mlx.core as mx

        masked = [i for i, row in enumerate(rows) if row.mask is not None]
        if masked:
            # The forward is running: the masks are computed beside it. Before the processors,
            # which never lift a -inf, so that min_tokens sees what the grammar allows.
            masks = [rows[i].mask for i in masked]
            bits = self._masks.compute(masks, [fed[i] for i in masked])
            width = self._mask_width or min(m.width for m in masks)
            logits = self._masks.apply(logits, masked, bits, width)
        logits = self._process(rows, logits, inputs)
        wanted = [i for i, row in enumerate(rows) if row.logprobs]
        logprobs = None
        if wanted or any(not row.sampler.greedy for row in rows):
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        tokens = pick([row.sampler for row in rows], logits, logprobs)
        return _Picks(tokens, {i: logprobs[i] for i in wanted})

    def _process(self, rows: list[Row], logits, inputs):
        """The rows' logits processors (logit_bias, penalties, min_tokens), each given the
        row's tokens so far, as mlx-lm's generator calls them."""
        import mlx.core as mx
        from mlx_lm.models.cache import TokenBuffer

        if not any(row.processors for row in rows):
            return logits
        out = []
        for i, row in enumerate(rows):
            row_logits = logits[i : i + 1]
            if row.processors:
                if row.context is None:
                    row.context = TokenBuffer(row.tokens)
                context = row.context.update_and_fetch(inputs[i : i + 1])
                for processor in row.processors:
                    row_logits = processor(context, row_logits)
            out.append(row_logits)
        return mx.concatenate(out, axis=0)
