"""The diarization engine through the engine-thread bridge: a recording of two espeak-ng voices
(male and female variants, which GE2E tells apart; Kokoro's are in test_quality.py) with a known
speaker, the speaker count option, a streaming session's utterances (voice pieces clustered by a
SpeakerTrack), and a missing speaker model as a 400."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.engine import DiarizationEngine, DiarizeJob, VoicesJob
from deployments.diarization.track import SpeakerTrack
from deployments.hub import ModelUnavailable
from deployments.protocol.errors import APIError
from tests.speech import silence, speak

RATE = 16000
MALE, FEMALE = "en-us+m3", "en+f4"
LINES = [
    (MALE, "The quick brown fox jumps over the lazy dog near the river bank."),
    (FEMALE, "Please call Stella and ask her to bring these things with her."),
    (MALE, "We will need another week to finish the testing of the new parts."),
    (FEMALE, "Thursday afternoon works for everyone on my team and the room is free."),
]


@pytest.fixture(scope="module")
def recording() -> tuple[np.ndarray, list[tuple[float, float, str]]]:
    parts, turns, t = [silence(0.5)], [], 0.5
    for voice, text in LINES:
        clip = speak(text, voice=voice)
        turns.append((t, t + len(clip) / RATE, voice))
        parts += [clip, silence(1.0)]
        t += len(clip) / RATE + 1.0
    return np.concatenate(parts), turns


async def test_two_voices_and_a_known_one(recording):
    samples, turns = recording
    engine = await DiarizationEngine.start()
    try:
        reference = speak("Some other words entirely, read by the same voice.", voice=FEMALE)
        job = DiarizeJob(samples, RATE, DiarizationConfig(), references={"stella": reference})
        result = await engine.diarize(job)
        assert sorted(result.labels) == ["A", "stella"]
        for start, end, voice in turns:
            assert (result.labels[result.speaker_of(start, end)] == "stella") == (voice == FEMALE)
        # Another rate is resampled; an exact count overrides the threshold.
        at_8k = await engine.diarize(DiarizeJob(samples[::2], RATE // 2, DiarizationConfig(), SpeakerCount(3)))
        assert at_8k.speakers == 3 and at_8k.duration == pytest.approx(result.duration, abs=0.01)
        assert engine.stats["recordings"] == 2
    finally:
        engine.shutdown()


async def test_a_sessions_utterances_are_embedded_and_clustered_across_utterances(recording):
    samples, turns = recording
    engine = await DiarizationEngine.start()
    track = SpeakerTrack()
    try:
        for start, end, _ in turns:  # each turn is one utterance, as a session finalises it
            offset = start - 0.3
            utterance = samples[int(offset * RATE) : int((end + 0.3) * RATE)]
            pieces, embeddings = await engine.voices(VoicesJob(utterance, DiarizationConfig()))
            assert pieces and embeddings.shape == (len(pieces), 256)
            assert all(0 <= p.start < p.end <= len(utterance) / RATE for p in pieces)
            track.add(offset, pieces, embeddings)
    finally:
        engine.shutdown()
    assert track.speakers == 2
    assert [track.speaker_of(start, end) for start, end, _ in turns] == [0, 1, 0, 1]


async def test_a_missing_speaker_model_is_a_400(monkeypatch):
    def missing():
        raise ModelUnavailable("the PyPI package 'resemblyzer' is not installed")

    from deployments.diarization import pipeline

    monkeypatch.setattr(pipeline, "Diarizer", missing)
    with pytest.raises(APIError) as e:
        await DiarizationEngine.start()
    assert e.value.status_code == 400 and e.value.code == "diarization_unavailable"
    assert "resemblyzer" in e.value.message
