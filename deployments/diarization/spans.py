"""The time side of diarization: which pieces of a recording get an embedding, and how labelled
pieces become speaker turns and label a transcript's segments. Pure Python, times in seconds.

Pieces come from the VAD's speech spans, cut further where an ASR segment ends inside a span
(Whisper starts a new segment at a change of speaker more often than the VAD sees a pause), and
spans longer than a window cut into equal windows, so one embedding never averages two voices
for long.
"""

from __future__ import annotations

import math
import string
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start

    def overlap(self, start: float, end: float) -> float:
        return max(0.0, min(self.end, end) - max(self.start, start))


@dataclass(frozen=True)
class Turn:
    """A stretch of one speaker: `speaker` is the cluster's 0-based index (MiniInfer's `speaker`)."""

    start: float
    end: float
    speaker: int


def cut_at(spans: Sequence[Span], boundaries: Iterable[float], min_piece_s: float) -> list[Span]:
    """`spans` cut at each boundary inside them that leaves pieces of at least `min_piece_s`."""
    cuts = sorted(set(boundaries))
    out = []
    for span in spans:
        start = span.start
        for t in cuts:
            if start + min_piece_s <= t <= span.end - min_piece_s:
                out.append(Span(start, t))
                start = t
        out.append(Span(start, span.end))
    return out


def windows(spans: Sequence[Span], max_s: float) -> list[Span]:
    """Spans longer than `max_s` split into the fewest equal windows no longer than it."""
    out = []
    for span in spans:
        n = max(1, math.ceil(span.duration / max_s - 1e-9))
        step = span.duration / n
        out += [Span(span.start + k * step, span.start + (k + 1) * step) for k in range(n)]
    return out


def turns(spans: Sequence[Span], labels: Sequence[int], max_gap_s: float) -> list[Turn]:
    """Consecutive spans of one speaker no more than `max_gap_s` apart joined into turns."""
    out: list[Turn] = []
    for span, label in sorted(zip(spans, labels), key=lambda p: p[0].start):
        last = out[-1] if out else None
        if last is not None and last.speaker == label and span.start - last.end <= max_gap_s:
            out[-1] = Turn(last.start, max(last.end, span.end), label)
        else:
            out.append(Turn(span.start, span.end, label))
    return out


def speaker_of(start: float, end: float, speaker_turns: Sequence[Turn]) -> int | None:
    """The speaker who talks most within [start, end]; with none there, the nearest turn's
    speaker (a segment in a pause); None with no turns at all."""
    if not speaker_turns:
        return None
    talk: dict[int, float] = {}
    for t in speaker_turns:
        talk[t.speaker] = talk.get(t.speaker, 0.0) + Span(t.start, t.end).overlap(start, end)
    best = max(talk, key=lambda s: talk[s])
    if talk[best] > 0:
        return best
    middle = (start + end) / 2
    return min(speaker_turns, key=lambda t: max(t.start - middle, middle - t.end, 0.0)).speaker


def letters(n: int, skip: Collection[str] = ()) -> list[str]:
    """OpenAI's labels for unknown speakers: A, B, ..., Z, AA, AB, ..., `n` of them, leaving
    out those in `skip` (known speakers' names)."""
    out, alphabet, k = [], string.ascii_uppercase, 0
    while len(out) < n:
        label, k = "", k + 1
        rest = k
        while rest:
            rest, r = divmod(rest - 1, 26)
            label = alphabet[r] + label
        if label not in skip:
            out.append(label)
    return out


@dataclass
class Diarization:
    """The turns (speaker = 0-based cluster index, in order of first speech) and each cluster's
    label: a known speaker's name (those in `known`), else A, B, ..."""

    turns: list[Turn]
    labels: list[str]
    duration: float
    known: frozenset[str] = field(default_factory=frozenset)

    def labels_of(self, clusters: Sequence[int]) -> list[str]:
        """The labels of `clusters`, the speakers an answer names, in that order: known names
        kept, the others lettered again A, B, ... in this order (an answer that names two of
        three clusters says A and B, whichever clusters they are)."""
        spare = iter(letters(len(clusters), self.known))
        return [self.labels[c] if self.labels[c] in self.known else next(spare) for c in clusters]

    @property
    def speakers(self) -> int:
        return len(self.labels)

    def speaker_of(self, start: float, end: float) -> int | None:
        return speaker_of(start, end, self.turns)
