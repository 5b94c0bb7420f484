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


@pytest.fixture(scope="module")
def diarizer():
    from deployments.diarization.pipeline import Diarizer

    return Diarizer()


@pytest.mark.slow
def test_the_telephone_call_is_diarized_within_the_fields_bar(diarizer):
    """Two women on a phone line, turns 0.1-0.5 s apart: the two voices found, DER <= 0.15."""
    c = conversation("sample")
    result = diarizer.diarize(c.samples)
    scored = der(c.turns, [(t.start, t.end, t.speaker) for t in result.turns])
    print(f"sample: DER {scored.der:.3f}, {result.speakers} speakers")
    assert result.speakers == 2 and result.labels == ["A", "B"]
    assert scored.der <= 0.15, scored


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dev00", "dev01", "trn03"])
def test_two_speaker_meetings_are_diarized_within_the_fields_bar(diarizer, name):
    """AMI's far-field meetings of two speakers, overlapped speech scored: both voices found,
    DER <= 0.15 (dev00 was 0.234 with one speaker's pauses of 0.3-1 s left unspoken; trn03's
    second speaker says 1.2 s, one window, and was merged into the first)."""
    c = conversation(name)
    result = diarizer.diarize(c.samples)
    scored = der(c.turns, [(t.start, t.end, t.speaker) for t in result.turns])
    print(f"{name}: DER {scored.der:.3f}, {result.speakers} speakers")
    assert result.speakers == 2
    assert scored.der <= 0.15, scored


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tst00", "tst01"])
def test_four_speaker_meetings_are_reported(diarizer, name):
    """The AMI meetings of four speakers (tst01's say 6 s in all), mostly overlapped speech:
    printed and measured in bench/diarization.py; never an empty answer, and at most one
    speaker too many (tst00: 5, one voice split where it overlaps another)."""
    c = conversation(name)
    result = diarizer.diarize(c.samples)
    scored = der(c.turns, [(t.start, t.end, t.speaker) for t in result.turns])
    print(f"{name}: DER {scored.der:.3f} (missed {scored.missed:.1f} s, confusion {scored.confusion:.1f} s), "
          f"{result.speakers} speakers of {len(c.speakers)}")  # fmt: skip
    assert result.turns and 1 <= result.speakers <= len(c.speakers) + 1 and scored.der < 1.0


@pytest.mark.slow
async def test_a_diarized_transcript_of_the_call_is_timed_and_labelled_by_word(diarizer, tmp_path):
    """The issue's case end to end in process, with the real Whisper tiny.en: the diarized
    transcript's segments score DER <= 0.15 against the call's turns, name 2 speakers (0 and
    1), start where the words are (the first "Hello?" near 6.7 s, not seconds early), and the
    words are those of the plain transcript (WER against the STM no worse)."""
    from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en
    from deployments.hub import default_cache_dir

    c = conversation("sample")
    engine = await ASREngine.start(WHISPER_TINY_EN_ID, ensure_whisper_tiny_en(default_cache_dir()), EngineConfig())
    try:
        plain = await engine.transcribe([c.samples], TranscribeOptions())
        (timed,) = await engine.transcribe([c.samples], TranscribeOptions(word_timestamps=True))
    finally:
        engine.shutdown()
    speakers = diarizer.diarize(c.samples)
    timed.label_speakers(speakers.speaker_of, speakers.labels_of)
    segments = [(s.start, s.end, s.speaker) for s in timed.segments]
    scored = der(c.turns, segments)
    reference = reference_words("sample")
    print(f"sample transcript: DER {scored.der:.3f}, WER {wer(reference, timed.text):.3f} "
          f"(plain {wer(reference, plain[0].text):.3f}), {len(timed.segments)} segments")  # fmt: skip
    assert {s.speaker for s in timed.segments} == {0, 1} and len(timed.speaker_labels) == 2
    assert scored.der <= 0.15, (scored, segments)
    assert abs(timed.segments[0].start - 6.69) < 0.3, segments[0]
    assert wer(reference, timed.text) <= wer(reference, plain[0].text)
