"""The time side of diarization: which pieces of a recording get an embedding, how labelled
pieces become speaker turns, and how turns label a transcript's segments. Times in seconds.

Pieces are sliding windows over the VAD's speech spans, overlapping, so that a change of voice inside a span falls near the middle of some
window. Each moment of speech then gets the speaker its covering windows vote for, the windows
weighing most at their middle (`voted_turns`): on real calls turns are 0.1-0.5 s apart and a
span of the VAD often holds several of them.
"""

from __future__ import annotations

import math
import string
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np


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


def windows(spans: Sequence[Span], window_s: float, hop_s: float) -> list[Span]:
    """Windows of `window_s` every `hop_s` over each span, the last one ending where the span
    ends; a span no longer than a window is one piece."""
    out = []
    for span in spans:
        if span.duration <= window_s + 1e-9:
            out.append(span)
            continue
        n = math.ceil((span.duration - window_s) / hop_s - 1e-9)
        out += [Span(span.start + k * hop_s, span.start + k * hop_s + window_s) for k in range(n)]
        out.append(Span(span.end - window_s, span.end))
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


def voted_turns(pieces: Sequence[Span], labels: Sequence[int], frame_s: float, max_gap_s: float) -> list[Turn]:
    """Who speaks at each moment covered by `pieces` (overlapping windows, each labelled): in
    every frame of `frame_s`, the label with most votes, a window voting with a weight that
    falls from 1 at its middle to ~0 at its edges (where the next voice may already speak).
    Runs of one speaker's frames become turns, joined over pauses up to `max_gap_s`."""
    if not pieces:
        return []
    n = math.ceil(max(p.end for p in pieces) / frame_s) + 1
    votes = np.zeros((n, max(labels) + 1))
    for piece, label in zip(pieces, labels):
        first = int(round(piece.start / frame_s))
        last = max(int(round(piece.end / frame_s)), first + 1)
        middles = (np.arange(first, last) + 0.5) * frame_s
        half = max(piece.duration / 2, frame_s)
        votes[first:last, label] += np.clip(1 - np.abs(middles - (piece.start + piece.end) / 2) / half, 1e-3, 1)
    winners = np.where(votes.sum(axis=1) > 0, votes.argmax(axis=1), -1)  # -1: nobody
    starts = np.concatenate([[0], np.flatnonzero(np.diff(winners)) + 1])  # runs of one winner
    ends = np.concatenate([starts[1:], [n]])
    runs = [(Span(a * frame_s, b * frame_s), int(winners[a])) for a, b in zip(starts, ends) if winners[a] >= 0]
    return turns([span for span, _ in runs], [label for _, label in runs], max_gap_s)


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

    def voiced(self) -> Diarization:
        """The same, with only the clusters that have turns (a cluster can lose every moment
        to its neighbours' votes), renumbered in order of first speech and lettered again."""
        order: dict[int, int] = {}
        for t in self.turns:
            order.setdefault(t.speaker, len(order))
        renamed = [Turn(t.start, t.end, order[t.speaker]) for t in self.turns]
        return Diarization(renamed, self.labels_of(list(order)), self.duration, self.known)

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
