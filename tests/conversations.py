"""Real recorded conversations for diarization, with their reference speaker turns, scored by
pyannote.metrics (DER) and jiwer (WER). tests/fixtures/conversations/ holds them (FLAC, 16 kHz
mono, 30 s each), taken from the pyannote-audio 4.0.7 sdist on PyPI (MIT):

- `sample`: pyannote's own sample (src/pyannote/audio/sample/): a real telephone call, two
  women, 8 kHz speech at 16 kHz, 13 utterances 0.4-4.4 s long, 0.1-0.5 s apart, one overlap;
  its RTTM and its STM transcript (for WER).
- `dev00`, `dev01`, `trn03`, `tst00`, `tst01`: 30 s excerpts of AMI meetings (pyannote's test
  data, tests/data/, AMI corpus: CC BY 4.0): real room audio, 2 to 4 speakers, short turns and
  overlapping speech; their RTTMs (debug.*.rttm).

These are genuine recordings with their published reference turns, not arranged ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

DIR = Path(__file__).parent / "fixtures" / "conversations"
RATE = 16000
COLLAR_S = 0.25  # the usual DER collar: +-0.25 s around each reference boundary not scored
NAMES = ("sample", "dev00", "dev01", "trn03", "tst00", "tst01")
KIND = {"sample": "telephone"} | {n: "meeting room" for n in NAMES[1:]}

Turns = Iterable[tuple[float, float, object]]  # (start s, end s, speaker)


@dataclass(frozen=True)
class Conversation:
    name: str
    samples: np.ndarray  # float32 mono, 16 kHz
    turns: tuple[tuple[float, float, str], ...]  # the reference (RTTM)

    @property
    def speakers(self) -> set[str]:
        return {t[2] for t in self.turns}

    @property
    def kind(self) -> str:
        return KIND[self.name]


def reference_turns(name: str) -> tuple[tuple[float, float, str], ...]:
    turns = []
    for line in (DIR / "reference.rttm").read_text().splitlines():
        f = line.split()
        if f and f[0] == "SPEAKER" and f[1] == name:
            start, duration = float(f[3]), float(f[4])
            turns.append((start, start + duration, f[7]))
    return tuple(turns)


@cache
def conversation(name: str) -> Conversation:
    import soundfile as sf

    samples, rate = sf.read(DIR / f"{name}.flac", dtype="float32")
    assert rate == RATE, rate
    return Conversation(name, samples, reference_turns(name))


def conversations() -> list[Conversation]:
    return [conversation(n) for n in NAMES]


def reference_words(name: str) -> str:
    """The STM transcript's text, in order (only `sample` has one)."""
    lines = [line.split(maxsplit=5) for line in (DIR / f"{name}.stm").read_text().splitlines() if line.strip()]
    return " ".join(f[5] for f in sorted(lines, key=lambda f: float(f[3])) if len(f) == 6)


def annotation(turns: Turns, uri: str = "audio"):
    from pyannote.core import Annotation, Segment

    out = Annotation(uri=uri)
    for k, (start, end, speaker) in enumerate(turns):
        if end > start:
            out[Segment(start, end), k] = str(speaker)
    return out


@dataclass(frozen=True)
class DER:
    """pyannote.metrics' DiarizationErrorRate components (seconds) and rate."""

    der: float
    missed: float
    false_alarm: float
    confusion: float
    total: float


def der(reference: Turns, hypothesis: Turns, collar: float = COLLAR_S, duration: float = 30.0) -> DER:
    """DER with the optimal speaker mapping, overlapped speech scored, `collar` s around every
    reference boundary left out, over the recording's `duration` (the UEM)
    (pyannote.metrics.diarization.DiarizationErrorRate)."""
    from pyannote.core import Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    metric = DiarizationErrorRate(collar=2 * collar, skip_overlap=False)  # pyannote's collar is the total width
    uem = Timeline([Segment(0.0, duration)])
    c = metric(annotation(reference), annotation(hypothesis), uem=uem, detailed=True)
    return DER(
        float(c["diarization error rate"]),
        float(c["missed detection"]),
        float(c["false alarm"]),
        float(c["confusion"]),
        float(c["total"]),
    )


def normalise(text: str) -> str:
    import re

    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalise(reference), normalise(hypothesis)))
