"""The real-speech evaluation set (tests/conversations.py) and its scorers: the recordings load
with their reference turns, pyannote.metrics' DER behaves as documented on them (0 for the
reference itself under any renaming, the collar, a single speaker's confusion), jiwer's WER."""

from __future__ import annotations

import pytest

from tests.conversations import NAMES, RATE, conversation, der, reference_words, wer


@pytest.mark.parametrize("name", NAMES)
def test_each_recording_has_audio_and_reference_turns(name):
    c = conversation(name)
    assert len(c.samples) / RATE == pytest.approx(30.0, abs=0.01)
    assert 2 <= len(c.speakers) <= 4 and all(0 <= s < e <= 30.01 for s, e, _ in c.turns)
    assert c.samples.std() > 0.001  # speech, not silence


def test_der_is_pyannotes():
    turns = conversation("sample").turns
    renamed = [(s, e, "x" + speaker) for s, e, speaker in turns]
    assert der(turns, renamed).der == 0.0
    one_voice = [(min(t[0] for t in turns), max(t[1] for t in turns), "x")]
    scored = der(turns, one_voice, collar=0.0)
    # The other voice is confusion, the pauses false alarm, the overlap (two voices, one label) missed.
    assert scored.confusion > 0 and scored.false_alarm > 0 and scored.missed > 0
    assert der(turns, one_voice).total < scored.total  # the collar leaves the boundaries out
    shifted = [(s + 0.2, e + 0.2, speaker) for s, e, speaker in turns]
    assert der(turns, shifted).der < 0.02 < der(turns, shifted, collar=0.0).der


def test_wer_on_the_calls_transcript():
    words = reference_words("sample")
    assert words.startswith("Hello? Hello? Oh, hello.") and wer(words, words) == 0.0
    assert wer(words, words.replace("Chicago", "Chicago, Illinois")) == pytest.approx(2 / len(words.split()))
