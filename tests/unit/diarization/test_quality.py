"""Diarization of real multi-voice speech, measured: dialogues of 2-4 Kokoro-82M voices
(tests/dialogues.py, cached on disk after the first synthesis), scored by DER against the
turns they were assembled from. On gaps >= 1 s (MiniInfer's reliable regime) every dialogue
must get its speaker count right and a DER <= 0.15; the shorter gaps are printed (and measured
in bench/diarization.py), not asserted."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.pipeline import Diarizer
from tests.dialogues import GAPS_S, RATE, SHAPES, dialogue, score, utterance

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def diarizer() -> Diarizer:
    return Diarizer()


@pytest.fixture(scope="module")
def scores(diarizer):
    out = {}
    for gap in GAPS_S:
        for n, turns, seed in SHAPES:
            d = dialogue(n, turns, gap, seed)
            out[d.name] = score(d, diarizer.diarize(d.samples, RATE, DiarizationConfig()))
    for s in out.values():
        c = s.der
        print(f"{s.dialogue.name}: DER {c.der:.3f} (missed {c.missed:.2f} s, false alarm {c.false_alarm:.2f} s, "
              f"confusion {c.confusion:.2f} s of {c.total:.1f} s), speakers {s.found}/{len(s.dialogue.speakers)}")  # fmt: skip
    return out


@pytest.mark.parametrize("gap", [g for g in GAPS_S if g >= 1.0])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}spk-seed{s[2]}")
def test_gaps_of_a_second_or_more(scores, gap, shape):
    n, turns, seed = shape
    s = scores[f"{n}spk-{turns}turns-gap{gap:g}-seed{seed}"]
    assert s.found == n, (s.found, n)
    assert s.der.der <= 0.15, s.der


def test_short_gaps_are_reported(scores):
    short = [s for s in scores.values() if s.dialogue.gap_s < 1.0]
    assert short and all(np.isfinite(s.der.der) for s in short)


def test_an_exact_speaker_count_is_honoured(diarizer):
    d = dialogue(3, 6, 0.5, seed=2)
    for n in (2, 3, 4):
        assert diarizer.diarize(d.samples, RATE, count=SpeakerCount(exactly=n)).speakers == n


def test_known_speakers_are_named_and_others_get_letters(diarizer):
    d = dialogue(3, 6, 1.0, seed=2)
    voices = sorted(d.speakers)
    # A reference clip of one voice reading a sentence the dialogue does not contain.
    reference = utterance(voices[0], "Our quarterly review is next week, please prepare the figures.")
    assert 2.0 <= len(reference) / RATE <= 10.0
    result = diarizer.diarize(d.samples, RATE, known={"pat": diarizer.embed(reference)})
    assert sorted(result.labels) == ["A", "B", "pat"]
    for turn in d.turns:  # pat's turns are labelled pat, nobody else's are
        found = result.labels[result.speaker_of(turn.start, turn.end)]
        assert (found == "pat") == (turn.speaker == voices[0]), (turn, found)
