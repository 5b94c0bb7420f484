"""Continuous batching for the LLM engine: sequences join while others decode, prefill in chunks
beside the decode steps, and leave the moment they finish or are removed.

`Batch.next()` is one round: a decode step of every row past its prompt
(deployments/llm/decode.py), then, while the decode batch has room, one prefill chunk of the
prompts being admitted (deployments/llm/prefill.py). Sequences wait in line beyond the
prefill batch's size or the decode batch's capacity. The engine (deployments/llm/engine.py)
talks to it by uid: insert, extract a row's cache, remove, step.

This is mlx-lm's `BatchGenerator` scheduling (same admission, same segment semantics), owned
here so that the decode step can take stages mlx-lm's cannot: grammar masks overlapped with
the model (deployments/llm/masks.py), and the stages that follow.

Ray-free; MLX is imported where it is used.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.llm.constraints import TokenMask
from deployments.llm.decode import Decode, Row, TokenEvent
from deployments.llm.prefill import Prefill, PromptEvent
from deployments.llm.sampler import RowSampler


@dataclass
class Sequence:
    """What the engine inserts: a prompt still to run (in segments) after the `done` tokens its
    `cache` holds, and how to decode it."""

    segments: list[list[int]]
    max_tokens: int
    sampler: RowSampler
    cache: Optional[list[Any]] = None  # None: a fresh cache
    done: list[int] = field(default_factory=list)
    processors: tuple = ()
    stop_tokens: list[tuple[int, ...]] = field(default_factory=list)  # end-of-sequence, token stop sequences
    mask: Optional[TokenMask] = None
    logprobs: bool = False
    adapter: int = 0  # its LoRA adapter's index in the batch's adapters stage (0: the base model)


@dataclass
class BatchStats:
    """What the batch did while a `stats()` block ran."""

    prompt_tokens: int = 0
    prompt_time: float = 0.0
    generation_tokens: int = 0
    generation_steps: int = 0
    decode_time: float = 0.0
    drafted_tokens: int = 0  # speculative decoding: drafted tokens the model ran
    accepted_tokens: int = 0  # and of those, the ones it kept


@dataclass(eq=False)
class _Waiting:
    row: Row
    cache: list[Any]
    segments: list[list[int]]


class Batch:
    def __init__(
        self,
        model: Any,
        *,
        capacity: int = 32,
        prefill_batch: int = 8,
        prefill_step: int = 2048,
        stream: Any = None,
        mask_width: Optional[int] = None,
        drafter: Any = None,
        adapters: Any = None,
        followers: Any = None,
    ):
        import mlx.core as mx

        self.model = model
        self.capacity = max(capacity, prefill_batch)
        self.prefill_batch = prefill_batch
        self.stream = stream or mx.default_stream(mx.default_device())
        self.waiting: deque[_Waiting] = deque()
        self.prefill = Prefill(model, prefill_step, adapters)
        self.decode = Decode(model, mask_width=mask_width, drafter=drafter, adapters=adapters, followers=followers)
        self._next_uid = 0
        self.totals = BatchStats()

    # ------------------------------------------------------------------ the engine's calls

    def insert(self, seq: Sequence) -> int:
        from mlx_lm.generate import StopSequences
        from mlx_lm.models.cache import make_prompt_cache

        segments = [s for s in seq.segments if s]
        if not segments:
            raise ValueError("a sequence needs a prompt to run")
        if seq.max_tokens <= 0:
            raise ValueError("max_tokens must be positive")
        if len(segments[-1]) != 1:  # the last token runs alone: it is the first decode step's input
            segments[-1], last = segments[-1][:-1], segments[-1][-1:]
            segments.append(last)
        uid, self._next_uid = self._next_uid, self._next_uid + 1
        row = Row(
            uid,
            list(seq.done),
            seq.max_tokens,
            seq.sampler,
            tuple(seq.processors),
            StopSequences(seq.stop_tokens or None).matcher(),
            seq.mask,
            seq.logprobs,
            adapter=seq.adapter,
        )
        cache = seq.cache if seq.cache is not None else make_prompt_cache(self.model)
        self.waiting.append(_Waiting(row, cache, segments))
        return uid

    def extract_cache(self, uids: list[int]) -> dict[int, tuple[list[Any], list[int]]]:
        """uid -> (a copy of its KV cache, the tokens it holds); a waiting row's own cache."""
        out = {}
        for uid, (where, i) in self._find(uids).items():
            if where == "waiting":
                out[uid] = (self.waiting[i].cache, self.waiting[i].row.tokens)
            else:
                stage = self.prefill if where == "prefill" else self.decode
                out[uid] = (stage.extract_cache(i), stage.rows[i].tokens)
        return out

    def remove(self, uids: list[int], return_prompt_caches: bool = False) -> dict:
        caches = self.extract_cache(uids) if return_prompt_caches else {}
        found = self._find(uids)
        gone = {where: {i for w, i in found.values() if w == where} for where in ("waiting", "prefill", "decode")}
        if gone["waiting"]:
            self.waiting = deque(w for i, w in enumerate(self.waiting) if i not in gone["waiting"])
        if gone["prefill"]:
            self.prefill.filter([i for i in range(len(self.prefill)) if i not in gone["prefill"]])
        if gone["decode"]:
            self.decode.filter([i for i in range(len(self.decode)) if i not in gone["decode"]])
        return caches

    @property
    def prompt_cache_nbytes(self) -> int:
        total = sum(c.nbytes for w in self.waiting for c in w.cache)
        return total + sum(c.nbytes for c in self.prefill.cache) + sum(c.nbytes for c in self.decode.cache)

    def next(self) -> tuple[list[PromptEvent], list[TokenEvent]]:
        import mlx.core as mx

        with mx.stream(self.stream):
            return self._next()

    @contextlib.contextmanager
    def stats(self):
        """The work done while the block runs (nested blocks each count their own)."""
        start = BatchStats(**vars(self.totals))
        out = BatchStats()
        try:
            yield out
        finally:
            for name, value in vars(self.totals).items():
                setattr(out, name, value - getattr(start, name))

    # ------------------------------------------------------------------ one round

    def _next(self) -> tuple[list[PromptEvent], list[TokenEvent]]:
        tokens: list[TokenEvent] = []
        if len(self.decode):
            t0 = time.perf_counter()
            tokens = self.decode.step()
            self.totals.decode_time += time.perf_counter() - t0
            self.totals.generation_tokens += len(tokens)
            self.totals.generation_steps += 1
            self.totals.drafted_tokens = self.decode.counts["drafted"]
            self.totals.accepted_tokens = self.decode.counts["accepted"]
        if len(self.decode) >= self.capacity:
            return [], tokens
        self._admit()
        rows, cache, last, prompts = self.prefill.take_ready()
        if rows:
            self.decode.extend(rows, cache, last)
        t0 = time.perf_counter()
        events, run = self.prefill.chunk()
        self.totals.prompt_tokens += run
        self.totals.prompt_time += time.perf_counter() - t0
        return prompts + events, tokens

    def _admit(self) -> None:
        n = min(
            self.prefill_batch - len(self.prefill),
            self.capacity - len(self.decode),
            len(self.waiting),
        )
        if n <= 0:
            return
        admitted = [self.waiting.popleft() for _ in range(n)]
        self.prefill.extend([w.row for w in admitted], [w.cache for w in admitted], [w.segments for w in admitted])

    def _find(self, uids: list[int]) -> dict[int, tuple[str, int]]:
        wanted, found = set(uids), {}
        for where, rows in (
            ("decode", self.decode.rows),
            ("prefill", self.prefill.rows),
            ("waiting", [w.row for w in self.waiting]),
        ):
            for i, row in enumerate(rows):
                if row.uid in wanted:
                    found[row.uid] = (where, i)
        return found
