"""A streaming session's speakers (SpeakerTrack): utterances' pieces in stream time, speakers
from the clustering of everything heard so far, relabelled when a later voice regroups them."""

from __future__ import annotations

import numpy as np

from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.spans import Span
from deployments.diarization.track import SpeakerTrack

A, B = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])


def test_no_voice_yet_is_speaker_zero_of_none():
    track = SpeakerTrack()
    assert track.speakers == 0 and track.turns() == [] and track.speaker_of(0.0, 1.0) == 0
    track.add(5.0, [], np.zeros((0, 0)))  # an utterance the VAD found no speech in
    assert track.speakers == 0


def test_pieces_go_to_stream_time_and_voices_cluster():
    track = SpeakerTrack()
    track.add(0.0, [Span(0.2, 2.0)], np.array([A]))
    assert track.speakers == 1 and track.speaker_of(0.0, 2.0) == 0
    track.add(3.0, [Span(0.1, 1.0), Span(1.0, 2.5)], np.array([B, B * 0.9 + A * 0.05]))
    assert track.pieces[1:] == [Span(3.1, 4.0), Span(4.0, 5.5)]
    track.add(6.0, [Span(0.0, 2.0)], np.array([A]))
    assert track.speakers == 2
    assert [track.speaker_of(*u) for u in ((0.0, 2.0), (3.0, 5.5), (6.0, 8.0))] == [0, 1, 0]


def test_labels_follow_first_appearance_and_regroup_when_the_threshold_allows():
    close = np.array([0.9, 0.436, 0.0])  # cosine distance 0.1 from A: the same speaker at 0.25
    track = SpeakerTrack(DiarizationConfig(threshold=0.05))
    track.add(0.0, [Span(0.0, 2.0)], np.array([A]))
    track.add(3.0, [Span(0.0, 2.0)], np.array([close]))
    assert track.speakers == 2  # a strict threshold splits them
    loose = SpeakerTrack(DiarizationConfig(threshold=0.25), SpeakerCount())
    for offset, voice in ((0.0, A), (3.0, close), (6.0, B)):
        loose.add(offset, [Span(0.0, 2.0)], np.array([voice]))
    assert loose.speakers == 2 and [loose.speaker_of(o, o + 2) for o in (0.0, 3.0, 6.0)] == [0, 0, 1]


def test_an_exact_count_is_kept():
    track = SpeakerTrack(count=SpeakerCount(exactly=1))
    track.add(0.0, [Span(0.0, 2.0)], np.array([A]))
    track.add(3.0, [Span(0.0, 2.0)], np.array([B]))
    assert track.speakers == 1
