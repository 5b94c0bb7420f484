"""The prefill side of the batch: prompts run through the model together, a chunk of at most
`step` tokens of each per call, until only each prompt's last token is left (that token is the
row's first decode step, deployments/llm/decode.py).

A prompt comes in segments (deployments/llm/prefix_cache.py splits it at the end of its system
prompt); a chunk never crosses a segment's end, so the engine can keep the cache there, and an
event says when a row reached one. Prompts of different lengths in one chunk are right-padded,
and the cache is rolled back into shape after it (mlx-lm's BatchKVCache prepare/finalize).

Ray-free; MLX is imported where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.llm.decode import Row


@dataclass
class PromptEvent:
    """A row's prefill reached the end of a segment (`end_of_prompt`: of all but its last token,
    and it moves to decoding)."""

    uid: int
    progress: tuple[int, int]
    end_of_segment: bool
    end_of_prompt: bool


@dataclass(eq=False)
class _Prompt:
    row: Row
    segments: list[list[int]]  # what is left to run, the last one a single token
    done: int = 0
    total: int = 0


class Prefill:
    def __init__(self, model: Any, step: int, adapters: Any = None):
        self.model = model
        self.adapters = adapters  # binds each row's LoRA adapter before a forward (decode.py), or None
        self.step = step
        self.prompts: list[_Prompt] = []
        self.cache: list[Any] = []

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def rows(self) -> list[Row]:
        return [p.row for p in self.prompts]

    def extend(self, rows: list[Row], caches: list[list[Any]], segments: list[list[list[int]]]) -> None:
        """`caches`: each row's own KV cache (what it starts from), merged into the batch's."""
        from mlx_lm.generate import _extend_cache, _merge_caches

        self.cache = _extend_cache(self.cache, _merge_caches(caches))
        for row, segs in zip(rows, segments):
            total = sum(len(s) for s in segs)
            self.prompts.append(_Prompt(row, segs, 0, total))

    def filter(self, keep: list[int]) -> None:
        self.prompts = [self.prompts[i] for i in keep]
        if not keep:
            self.cache = []
            return
        for c in self.cache:
            c.filter(keep)

    def take_ready(self) -> tuple[list[Row], list[Any], list[int], list[PromptEvent]]:
        """The rows with only their last token left leave: their rows, their batch cache, that
        token each, and their end-of-prompt events."""
        import copy

        ready = [i for i, p in enumerate(self.prompts) if len(p.segments) == 1 and len(p.segments[0]) == 1]
        if not ready:
            return [], [], [], []
        moving = [self.prompts[i] for i in ready]
        from mlx_lm.models.cache import BatchKVCache, BatchRotatingKVCache

        cache = []
        for c in self.cache:
            # Their filter rebinds arrays and never writes them: a shallow copy is enough (a
            # deep one would copy every row's cache only to drop most of it).
            leaving = copy.copy(c) if type(c) in (BatchKVCache, BatchRotatingKVCache) else copy.deepcopy(c)
            leaving.filter(ready)
            cache.append(leaving)
        self.filter([i for i in range(len(self.prompts)) if i not in set(ready)])
        events = [PromptEvent(p.row.uid, (p.total, p.total), True, True) for p in moving]
        return [p.row for p in moving], cache, [p.segments[0][0] for p in moving], events

    def extract_cache(self, i: int) -> list[Any]:
        return [c.extract(i) for c in self.cache]

    def chunk(self) -> tuple[list[PromptEvent], int]:
        """Run the next chunk of every row still prefilling: its events and the tokens run."""
        events, chunks = [], []
        for p in self.prompts:
            segment = p.segments[0]
            n = min(len(segment), self.step)
            chunks.append(segment[:n])
            p.segments[0] = segment[n:]
            end = not p.segments[0]
            if end:
                p.segments.pop(0)
            p.done += n
            events.append(PromptEvent(p.row.uid, (p.done, p.total), end, False))
        if chunks:
            self._run(chunks)
        return events, sum(len(c) for c in chunks)

    def _run(self, chunks: list[list[int]]) -> None:
        for p, chunk in zip(self.prompts, chunks):
            p.row.tokens += chunk
        if self.adapters is not None:
            self.adapters.bind(self.rows)
        run_chunks(self.model, self.cache, chunks, self.step)


def run_chunks(model: Any, cache: list[Any], chunks: list[list[int]], step: int) -> None:
    """Each row's chunk through the model into the batch `cache`, `step` tokens at a time;
    chunks of different lengths right-padded, the cache rolled back into shape after."""
    import mlx.core as mx

    lengths = [len(c) for c in chunks]
    longest = max(lengths)
    if longest == 0:
        return
    padding = [longest - n for n in lengths]
    if max(padding) > 0:
        tokens = mx.array([c + [0] * (longest - len(c)) for c in chunks])
        for c in cache:
            c.prepare(lengths=lengths, right_padding=padding)
    else:
        tokens = mx.array(chunks)
    while tokens.shape[1] > 0:
        n = min(step, tokens.shape[1])
        model(tokens[:, :n], cache=cache)
        mx.eval([c.state for c in cache])
        tokens = tokens[:, n:]
    if max(padding) > 0:
        for c in cache:
            c.finalize()
        mx.eval([c.state for c in cache])
    mx.clear_cache()
