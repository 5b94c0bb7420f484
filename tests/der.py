"""Diarization error rate, as pyannote.metrics defines it (no collar, overlaps scored):

    DER = (missed speech + false alarm + speaker confusion) / total reference speech

Over each stretch of time where the set of active speakers does not change (duration d, n_ref
reference and n_hyp hypothesis speakers): missed += d * max(0, n_ref - n_hyp), false alarm +=
d * max(0, n_hyp - n_ref), confusion += d * (min(n_ref, n_hyp) - correct), total += d * n_ref,
where `correct` counts the active pairs that the optimal one-to-one mapping of hypothesis
labels onto reference labels (the one maximising the overlap in time, Hungarian algorithm)
pairs. Pure numpy/scipy.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

Labelled = Sequence[tuple[float, float, Hashable]]  # (start s, end s, speaker)


@dataclass(frozen=True)
class DERComponents:
    missed: float
    false_alarm: float
    confusion: float
    total: float

    @property
    def der(self) -> float:
        errors = self.missed + self.false_alarm + self.confusion
        if self.total == 0:
            return 0.0 if errors == 0 else float("inf")
        return errors / self.total


def _active(turns: Labelled, start: float, end: float) -> set:
    return {speaker for s, e, speaker in turns if s < end and e > start}


def optimal_mapping(reference: Labelled, hypothesis: Labelled) -> dict[Hashable, Hashable]:
    """hypothesis label -> reference label, one to one, maximising the time they overlap."""
    refs = sorted({r for *_, r in reference}, key=str)
    hyps = sorted({h for *_, h in hypothesis}, key=str)
    if not refs or not hyps:
        return {}
    overlap = np.zeros((len(hyps), len(refs)))
    for hs, he, h in hypothesis:
        for rs, re, r in reference:
            overlap[hyps.index(h), refs.index(r)] += max(0.0, min(he, re) - max(hs, rs))
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    return {hyps[i]: refs[j] for i, j in zip(rows, cols) if overlap[i, j] > 0}


def der_components(reference: Labelled, hypothesis: Labelled) -> DERComponents:
    mapping = optimal_mapping(reference, hypothesis)
    times = sorted({t for s, e, _ in [*reference, *hypothesis] for t in (s, e)})
    missed = false_alarm = confusion = total = 0.0
    for start, end in zip(times, times[1:]):
        d = end - start
        ref, hyp = _active(reference, start, end), _active(hypothesis, start, end)
        correct = len({mapping[h] for h in hyp if h in mapping} & ref)
        missed += d * max(0, len(ref) - len(hyp))
        false_alarm += d * max(0, len(hyp) - len(ref))
        confusion += d * (min(len(ref), len(hyp)) - correct)
        total += d * len(ref)
    return DERComponents(missed, false_alarm, confusion, total)


def diarization_error_rate(reference: Labelled, hypothesis: Labelled) -> float:
    return der_components(reference, hypothesis).der
