"""The decode step: the sequences past their prompt, one forward pass of the model for all of
them per step.

A step is a short loop of stages:

    settle    the previous step's picks read back to the host: the tokens each row generated,
              which rows finished (end-of-sequence, a stop sequence, max_tokens), their
              log-probabilities; the KV of drafted tokens the model rejected dropped
    draft     with speculative decoding, each row's guess of its next tokens
              (deployments/llm/drafts.py), checked against its grammar
    forward   the model on each row's newest token and its draft, each row with its LoRA
              adapter (the adapters stage binds them); on a sharded replica every rank runs it
    select    the logits processors, the grammar masks (deployments/llm/masks.py: computed on the
              host while the forward runs), then each row's pick (deployments/llm/sampler.py) or,
              with a draft, the verdict on it (deployments/llm/speculation.py); on a sharded
              replica, rank 0's picks shared with the other ranks (deployments/llm/gang.py)

Without drafts the step runs one ahead, as mlx-lm's generator does: the forward of step t+1 is
dispatched before the host settles step t, so the engine's own per-token work (detokenizing,
parsing, sending) runs while the model computes. A row that finishes has then run one forward
past its end; its cache, as extracted, holds that last token, and so does its token list. With
drafts the host must know the newest tokens before it can guess the next ones: it settles first.

Ray-free; MLX is imported where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.llm.constraints import TokenMask
from deployments.llm.masks import MaskStage
from deployments.llm.sampler import RowSampler, pick
from deployments.llm.speculation import drop_last, verify


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
    context: Any = None  # its tokens as an MLX array for its processors (_Context, made on first use)
    pending_token: Optional[int] = None  # its newest token, settled and not run yet (drafting only)
    drafts: list[int] = field(default_factory=list)  # drafted tokens it ran in the pending step
    drafted: int = 0  # tokens it drafted, and of those the model accepted (for the metrics)
    accepted: int = 0
    adapter: int = 0  # its LoRA adapter's index in the adapters stage (0: the base model)


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
    """A step's selection, on the device until the next step settles it. Per row: its newest
    token, and with drafts how many of them it kept; the log-probabilities of the rows that
    asked, per position (kept drafts first, then the newest token)."""

    tokens: Any  # [B]
    accepted: Any = None  # [B] or None: no row ran a draft
    positions: list[int] = field(default_factory=list)  # per row: the positions it ran (newest token, K drafts)
    logprobs: dict[int, Any] = field(default_factory=dict)  # row -> [positions, V]


class Decode:
    def __init__(
        self,
        model: Any,
        masks: Optional[MaskStage] = None,
        mask_width: Optional[int] = None,
        drafter: Any = None,
        adapters: Any = None,
        followers: Any = None,
    ):
        self.model = model
        # A sharded replica's ranks (deployments/llm/gang.py RoundChannel): rank 0's picks go to
        # every rank, so all of them run the next step on the same tokens. None: one process.
        self.followers = followers
        self.adapters = adapters  # the LoRA stage: binds each row's adapter before a forward, or None
        self.rows: list[Row] = []
        self.cache: list[Any] = []
        self.drafter = drafter  # speculative decoding's draft stage (deployments/llm/drafts.py), or None
        self.counts = {"drafted": 0, "accepted": 0}  # drafted tokens run, and of those kept
        # Drafting paused (a batch at the drafter's max_batch): its state is rebuilt on resuming.
        self._paused = False
        self._pending: Optional[_Picks] = None
        self._masks = masks or MaskStage()
        self._mask_width = mask_width

    def __len__(self) -> int:
        return len(self.rows)

    # ------------------------------------------------------------------ membership

    def extend(self, rows: list[Row], cache: list[Any], last_tokens: list[int]) -> None:
        """Rows whose caches hold all of their prompt but its last token. Their first step runs
        at once, on its own (as mlx-lm's generator starts a sequence), so that their first
        token is settled by the next step of the whole batch."""
        import mlx.core as mx
        from mlx_lm.generate import _extend_cache

        inputs = mx.array(last_tokens, dtype=mx.uint32)[:, None]
        logits = self._forward(rows, inputs, cache)
        for row, token in zip(rows, last_tokens):
            row.tokens.append(token)
        if self.drafter is not None and not self._paused:
            self.drafter.join(rows)
        first = self._select(rows, logits, [None] * len(rows))
        mx.async_eval(first.tokens, *first.logprobs.values())
        self._pending = _concat(self._pending, len(self.rows), first)
        self.cache = _extend_cache(self.cache, cache)
        self.rows += rows

    def filter(self, keep: list[int]) -> None:
        import mlx.core as mx

        self.rows = [self.rows[i] for i in keep]
        if self.drafter is not None and not self._paused:
            self.drafter.filter(keep)
        if not keep:
            self.cache, self._pending = [], None
            return
        for c in self.cache:
            c.filter(keep)
        if self._pending is not None:
            index = mx.array(keep)
            pending = self._pending
            where = {old: new for new, old in enumerate(keep)}
            self._pending = _Picks(
                pending.tokens[index],
                None if pending.accepted is None else pending.accepted[index],
                [pending.positions[i] for i in keep],
                {where[i]: lp for i, lp in pending.logprobs.items() if i in where},
            )

    def extract_cache(self, i: int) -> list[Any]:
        return [c.extract(i) for c in self.cache]

    # ------------------------------------------------------------------ the step

    def step(self) -> list[TokenEvent]:
        import mlx.core as mx

        if not self.rows:
            return []
        drafting = self._drafting()
        ahead = not drafting and (self._pending is None or self._pending.accepted is None)
        events: list[TokenEvent] = []
        finished: set[int] = set()
        if not ahead:  # the drafts continue from the newest tokens: settle them first
            events, finished = self._settle(fed=False)
            self._drop(finished)
            if not self.rows:
                return events
        inputs, newest = self._feed(ahead, drafting)
        logits = self._forward(self.rows, inputs, self.cache)
        mx.async_eval(logits)
        if ahead:  # while the forward runs; the newest tokens it takes are now in its cache
            newest = self._pending.tokens.tolist()
            events, finished = self._settle(fed=True, newest=newest)
        picks = self._select(self.rows, logits, newest if ahead else [None] * len(self.rows))
        self._pending = picks
        mx.async_eval(picks.tokens, *([] if picks.accepted is None else [picks.accepted]), *picks.logprobs.values())
        if ahead:
            self._drop(finished)
        return events

    def _forward(self, rows: list[Row], inputs, cache: list[Any]):
        """The served model on `inputs` ([B, positions]), each row with its own adapter."""
        from deployments.kernels.llm_norms import one_forward

        if self.adapters is not None:
            self.adapters.bind(rows)
        with one_forward():  # a layer's queries and keys share their RoPE angles
            return self.model(inputs, cache=cache)

    def _drafting(self) -> bool:
        """Whether this step drafts: with a drafter, while the batch is under its `max_batch`.
        Past it a step is compute-bound (a CPU's, a GPU's with a large batch) and each drafted
        position costs what a token costs, so drafts slow the batch down (vLLM's
        disable_by_batch_size). Paused, the step runs one ahead again; resuming, the drafter's
        state is rebuilt from the rows' tokens (an n-gram index; a draft model's prefill)."""
        drafter = self.drafter
        drafting = drafter is not None and (drafter.max_batch is None or len(self.rows) < drafter.max_batch)
        if drafting and self._paused:
            drafter.reset()
            drafter.join(self.rows)
        self._paused = drafter is not None and not drafting
        return drafting

    def _feed(self, ahead: bool, drafting: bool):
        """[B, positions] inputs: each row's newest token, then its draft (padded)."""
        import mlx.core as mx

        if ahead:
            return self._pending.tokens[:, None], None
        newest = [row.pending_token for row in self.rows]
        for row, token in zip(self.rows, newest):
            if row.mask is not None:
                row.mask.advance(token)  # the grammar's state the draft is checked from
        drafts = self._draft(newest) if drafting else [[] for _ in self.rows]
        width = max(len(d) for d in drafts)
        for row, token, draft in zip(self.rows, newest, drafts):
            row.tokens += [token, *draft]
            row.drafts = draft
            row.drafted += len(draft)
            self.counts["drafted"] += len(draft)
        rows = [[t, *d] + [0] * (width - len(d)) for t, d in zip(newest, drafts)]
        return mx.array(rows, dtype=mx.uint32), newest

    def _draft(self, newest: list[int]) -> list[list[int]]:
        """Each row's guess of the tokens after its newest: never past its max_tokens, and cut
        where its grammar would refuse a token."""
        limits = [row.max_tokens - row.generated - 1 for row in self.rows]
        drafts = self.drafter.propose(self.rows, newest, limits)
        out = []
        for row, draft, limit in zip(self.rows, drafts, limits):
            draft = draft[: max(limit, 0)]
            if draft and row.mask is not None and not row.mask.error:
                draft = draft[: row.mask.matcher.validate_tokens(draft)]
            out.append(draft)
        return out

    def _settle(self, fed: bool, newest: Optional[list[int]] = None) -> tuple[list[TokenEvent], set[int]]:
        """The pending step's picks become events. `fed`: the newest tokens already ran (one
        ahead); else the rejected drafts leave the cache and each row keeps its newest token
        for the next feed."""
        pending = self._pending
        if newest is None:
            newest = pending.tokens.tolist()
        accepted = pending.accepted.tolist() if pending.accepted is not None else [0] * len(self.rows)
        if not fed:
            self._drop_rejected(accepted, pending.positions)
        if self.drafter is not None and not fed and not self._paused:
            self.drafter.settle(self.rows, [row.drafts[:kept] for row, kept in zip(self.rows, accepted)])
        events, finished = [], set()
        for i, (row, token, kept) in enumerate(zip(self.rows, newest, accepted)):
            generated = row.drafts[:kept] + [token]
            row.accepted += kept
            self.counts["accepted"] += kept
            if row.mask is not None:
                for t in row.drafts[:kept]:  # the grammar moves past the kept drafted tokens
                    row.mask.advance(t)
            row.drafts = []
            logprobs = pending.logprobs.get(i)
            for j, t in enumerate(generated):
                if fed and j == len(generated) - 1:
                    row.tokens.append(t)
                event = TokenEvent(row.uid, t, None if logprobs is None else logprobs[j], self._finish(row, t))
                events.append(event)
                if event.finish_reason is not None:
                    finished.add(i)
                    event.prompt_cache, event.all_tokens = self._kept(i, len(generated) - 1 - j if not fed else 0)
                    break
            row.pending_token = token
        return events, finished

    @staticmethod
    def _finish(row: Row, token: int) -> Optional[str]:
        row.generated += 1
        reason = "length" if row.generated >= row.max_tokens else None
        if row.stop is not None and row.stop.advance(token):
            reason = "stop"
        return reason

    def _drop(self, finished: set[int]) -> None:
        if finished:
            self.filter([i for i in range(len(self.rows)) if i not in finished])

    def _drop_rejected(self, accepted: list[int], positions: list[int]) -> None:
        """Row i ran `positions[i]` tokens; it keeps its newest and `accepted[i]` drafted ones."""
        for row, a in zip(self.rows, accepted):
            del row.tokens[len(row.tokens) - (len(row.drafts) - a) :]
        drop_last(self.cache, [p - 1 - a for p, a in zip(positions, accepted)])

    def _kept(self, i: int, extra: int) -> tuple[list[Any], list[int]]:
        """A finished row's cache and the tokens it holds, less the `extra` kept drafted
        tokens past the token it ended on."""
        row = self.rows[i]
        cache = self.extract_cache(i)
        if extra:
            del row.tokens[len(row.tokens) - extra :]
            for c in cache:
                c.trim(extra)
        return cache, row.tokens

    # ------------------------------------------------------------------ select

    def _select(self, rows: list[Row], logits, newest: list[Optional[int]]) -> _Picks:
        """Each row's pick from its logits ([B, positions, V]); `newest`: the token each row
        just ran, which its grammar mask consumes (None: consumed already, or its first step)."""
        import mlx.core as mx

        positions = logits.shape[1]
        if positions == 1:
            logits = logits[:, -1, :]
        masked = [i for i, row in enumerate(rows) if row.mask is not None]
        if masked:
            # The forward is running: the masks are computed beside it. Before the processors,
            # which never lift a -inf, so that min_tokens sees what the grammar allows.
            masks = [rows[i].mask for i in masked]
            drafts = [rows[i].drafts for i in masked] if positions > 1 else None
            bits = self._masks.compute(masks, [newest[i] for i in masked], drafts, positions)
            width = self._mask_width or min(m.width for m in masks)
            logits = self._masks.apply(logits, masked, bits, width)
        logits = self._process(rows, logits)
        wanted = [i for i, row in enumerate(rows) if row.logprobs]
        logprobs = None
        if wanted or any(not row.sampler.greedy for row in rows):
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        samplers = [row.sampler for row in rows]
        if positions == 1:
            tokens, accepted = pick(samplers, logits, logprobs), None
        else:
            drafts = mx.array([row.drafts + [0] * (positions - 1 - len(row.drafts)) for row in rows])
            verdict = verify(samplers, logits, logprobs, drafts, [len(row.drafts) for row in rows])
            tokens, accepted = verdict.token, verdict.accepted
        if self.followers is not None:
            tokens, accepted = self.followers.picks(tokens, accepted)
        return _Picks(
            tokens,
            accepted,
            [positions] * len(rows),
            {i: logprobs[i : i + 1] if positions == 1 else logprobs[i] for i in wanted},
        )

    def _process(self, rows: list[Row], logits):
        """The rows' logits processors (logit_bias, penalties, min_tokens), each position given
        the row's tokens through that position's input, as mlx-lm's generator calls them (they
        are pure functions of those tokens, so a drafted position is treated as if decoded)."""
        import mlx.core as mx

        if not any(row.processors for row in rows):
            return logits
        flat = logits.ndim == 2
        logits = logits[:, None, :] if flat else logits
        positions = logits.shape[1]
        out = []
        for i, row in enumerate(rows):
            row_logits = logits[i : i + 1]
            if row.processors:
                if row.context is None:
                    row.context = _Context()
                end = len(row.tokens) - len(row.drafts)  # through the newest token's position
                row_logits = mx.concatenate(
                    [
                        _processed(
                            row.processors,
                            row.context.view(row.tokens, min(end + j, len(row.tokens))),
                            row_logits[:, j],
                        )[:, None]
                        for j in range(positions)
                    ],
                    axis=1,
                )
            out.append(row_logits)
        logits = mx.concatenate(out, axis=0)
        return logits[:, 0, :] if flat else logits


class _Context:
    """A row's tokens as an MLX array, for its processors: grown as its token list grows, cut
    back when drafted tokens are dropped (the kept prefix never changes)."""

    def __init__(self):
        import mlx.core as mx

        self.buffer = mx.zeros((256,), dtype=mx.int32)
        self.size = 0

    def view(self, tokens: list[int], length: int):
        import mlx.core as mx

        self.size = min(self.size, length)
        if self.size < length:
            if length > self.buffer.shape[0]:
                grown = mx.zeros((2 * length,), dtype=mx.int32)
                grown[: self.size] = self.buffer[: self.size]
                self.buffer = grown
            self.buffer[self.size : length] = mx.array(tokens[self.size : length], dtype=mx.int32)
            self.size = length
        return self.buffer[:length]


def _processed(processors: tuple, context, logits):
    for processor in processors:
        logits = processor(context, logits)
    return logits


def _concat(pending: Optional[_Picks], offset: int, first: _Picks) -> _Picks:
    """The pending picks of the batch, with new rows' first picks after its `offset` rows."""
    import mlx.core as mx

    logprobs = {offset + i: lp for i, lp in first.logprobs.items()}
    if pending is None:
        return _Picks(first.tokens, None, list(first.positions), logprobs)
    accepted = pending.accepted
    if accepted is not None:
        accepted = mx.concatenate([accepted, mx.zeros(first.tokens.shape, dtype=accepted.dtype)])
    return _Picks(
        mx.concatenate([pending.tokens, first.tokens]),
        accepted,
        pending.positions + first.positions,
        {**pending.logprobs, **logprobs},
    )
