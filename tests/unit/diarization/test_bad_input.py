"""Recordings that are not conversations, diarized: silence only (no speaker), one voice (one
speaker), a second of speech, and a long recording's progress in the log. The real models
(Silero VAD, GE2E), espeak-ng's voice and the real call of tests/conversations.py."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from deployments.asr.transcript import Segment, Transcript
from deployments.diarization import pipeline
from deployments.diarization.pipeline import Diarizer
from tests.conversations import conversation
from tests.speech import silence, speak

RATE = 16000
VOICE = "en-us+m3"


@pytest.fixture(scope="module")
def diarizer() -> Diarizer:
    return Diarizer()


def test_silence_has_no_speaker(diarizer):
    quiet = diarizer.diarize(silence(10.0))
    hiss = diarizer.diarize(np.random.default_rng(0).normal(0, 1e-4, 10 * RATE).astype(np.float32))
    for result in (quiet, hiss):
        assert result.turns == [] and result.speakers == 0 and result.duration == pytest.approx(10.0)
    t = Transcript.join([], "en", 10.0)  # Whisper found no words either
    t.label_speakers(quiet.speaker_of, quiet.labels_of)
    assert t.segments == [] and t.speaker_labels == []


def test_one_voice_is_one_speaker(diarizer):
    lines = ["The quick brown fox jumps over the lazy dog.", "We will need another week to finish.",
             "Thursday afternoon works for everyone on my team.", "Please call Stella and ask her to come."]  # fmt: skip
    samples = np.concatenate([np.concatenate([speak(line, voice=VOICE), silence(0.4)]) for line in lines])
    result = diarizer.diarize(samples)
    assert result.speakers == 1 and result.labels == ["A"] and result.turns


@pytest.mark.parametrize("seconds", [1.0, 0.4])
def test_a_second_of_speech_is_at_most_one_speaker(diarizer, seconds):
    clip = speak("Hello there, good morning.", voice=VOICE)[: int(seconds * RATE)]
    result = diarizer.diarize(clip)
    assert result.speakers <= 1 and all(0 <= t.start < t.end <= seconds + 0.05 for t in result.turns)
    t = Transcript.join([Segment(0, 0.0, seconds, " Hello there.")], "en", seconds)
    t.label_speakers(result.speaker_of, result.labels_of)
    assert t.speaker_labels == ["A"] and t.segments[0].speaker == 0


def test_a_long_recording_logs_its_progress(diarizer, monkeypatch, caplog):
    monkeypatch.setattr(pipeline, "LOG_EVERY_S", 10.0)  # 10 min in service: 10 s for a 30 s call
    with caplog.at_level(logging.INFO, logger=pipeline.__name__):
        diarizer.diarize(conversation("sample").samples)
    progress = [r.getMessage() for r in caplog.records if "windowed" in r.getMessage()]
    assert len(progress) >= 2 and progress[0].startswith("Diarization: ")
