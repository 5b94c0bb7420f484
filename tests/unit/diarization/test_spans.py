"""Which pieces get an embedding, how labelled pieces become turns, who speaks in a segment,
and the diarization route's JSON and RTTM."""

from __future__ import annotations

import pytest

from deployments.diarization.formats import diarization_json, rttm
from deployments.diarization.spans import Diarization, Span, Turn, speaker_of, turns, voted_turns, windows


def test_spans_become_sliding_windows_the_last_at_the_end():
    four = windows([Span(0.0, 2.0)], 1.2, 0.3)
    assert [x for p in four for x in (p.start, p.end)] == pytest.approx([0.0, 1.2, 0.3, 1.5, 0.6, 1.8, 0.8, 2.0])
    assert windows([Span(1.0, 2.2)], 1.2, 0.3) == [Span(1.0, 2.2)]  # a window's length: one piece
    assert windows([Span(5.0, 5.4)], 1.2, 0.3) == [Span(5.0, 5.4)]  # shorter: one (short) piece
    pieces = windows([Span(0.0, 2.1), Span(3.0, 4.5)], 1.2, 0.3)
    assert [p.start for p in pieces] == pytest.approx([0.0, 0.3, 0.6, 0.9, 3.0, 3.3])


def test_each_moment_gets_the_speaker_its_windows_vote_for():
    # Speaker 0 from 0 to ~2 s, speaker 1 after it, one span: windows of 1.2 s every 0.3 s.
    pieces = windows([Span(0.0, 4.0)], 1.2, 0.3)
    labels = [0 if p.start + 0.6 < 2.0 else 1 for p in pieces]  # a window's speaker: at its middle
    (first, second) = voted_turns(pieces, labels, frame_s=0.05, max_gap_s=0.3)
    assert (first.speaker, second.speaker) == (0, 1) and first.start == 0.0 and second.end == pytest.approx(4.0)
    assert first.end == second.start == pytest.approx(2.0, abs=0.16)  # the change, to a frame or so
    # Pauses up to the gap join one speaker's speech; a longer pause splits the turn.
    apart = voted_turns([Span(0, 1), Span(1.2, 2), Span(3, 4)], [0, 0, 0], 0.05, 0.3)
    assert [x for t in apart for x in (t.start, t.end)] == pytest.approx([0.0, 2.0, 3.0, 4.0])
    assert voted_turns([], [], 0.05, 0.3) == []


def test_one_speakers_close_pieces_join_into_a_turn():
    pieces = [Span(0, 2), Span(2.3, 4), Span(4.5, 6), Span(8, 9), Span(9.2, 10)]
    assert turns(pieces, [0, 0, 1, 1, 0], max_gap_s=1.0) == [
        Turn(0, 4, 0),
        Turn(4.5, 6, 1),
        Turn(8, 9, 1),
        Turn(9.2, 10, 0),
    ]


def test_a_segment_gets_the_speaker_who_talks_most_in_it():
    t = [Turn(0, 4, 0), Turn(4.5, 9, 1)]
    assert speaker_of(0.2, 3.9, t) == 0
    assert speaker_of(3.0, 8.0, t) == 1  # 1 s of speaker 0, 3.5 s of speaker 1
    assert speaker_of(4.3, 4.45, t) == 1  # in the pause: the nearest turn
    assert speaker_of(4.05, 4.2, t) == 0
    assert speaker_of(1.0, 2.0, []) is None


@pytest.fixture
def result() -> Diarization:
    return Diarization([Turn(0.5, 2.25, 0), Turn(3.0, 4.0, 1), Turn(4.5, 6.0, 0)], ["A", "Mary Ann"], 6.5)


def test_json_has_speaches_shape(result):
    body = diarization_json(result)
    assert body == {
        "duration": 6.5,
        "speakers": ["A", "Mary Ann"],
        "segments": [
            {"start": 0.5, "end": 2.25, "speaker": "A"},
            {"start": 3.0, "end": 4.0, "speaker": "Mary Ann"},
            {"start": 4.5, "end": 6.0, "speaker": "A"},
        ],
    }
    assert result.speakers == 2 and result.speaker_of(3.1, 3.5) == 1


def test_rttm_lines(result):
    assert rttm(result, "my meeting").splitlines() == [
        "SPEAKER my_meeting 1 0.500 1.750 <NA> <NA> A <NA> <NA>",
        "SPEAKER my_meeting 1 3.000 1.000 <NA> <NA> Mary_Ann <NA> <NA>",
        "SPEAKER my_meeting 1 4.500 1.500 <NA> <NA> A <NA> <NA>",
    ]


def test_only_clusters_with_turns_are_speakers():
    d = Diarization([Turn(0, 1, 2), Turn(1, 2, 0)], ["A", "pat", "C"], 2.0, frozenset({"pat"})).voiced()
    assert d.turns == [Turn(0, 1, 0), Turn(1, 2, 1)] and d.labels == ["A", "B"]
