"""Which pieces get an embedding, how labelled pieces become turns, who speaks in a segment,
and the diarization route's JSON and RTTM."""

from __future__ import annotations

import pytest

from deployments.diarization.formats import diarization_json, rttm
from deployments.diarization.spans import Diarization, Span, Turn, cut_at, speaker_of, turns, windows


def test_spans_are_cut_at_transcript_boundaries_inside_them():
    spans = [Span(0.0, 5.0), Span(6.0, 8.0)]
    assert cut_at(spans, [2.0, 4.8, 7.0, 9.0], min_piece_s=0.5) == [
        Span(0.0, 2.0),
        Span(2.0, 5.0),  # 4.8 would leave a 0.2 s piece
        Span(6.0, 7.0),
        Span(7.0, 8.0),
    ]
    assert cut_at(spans, [], 0.5) == spans


def test_long_spans_become_equal_windows():
    assert windows([Span(0.0, 7.5)], max_s=3.0) == [Span(0.0, 2.5), Span(2.5, 5.0), Span(5.0, 7.5)]
    assert windows([Span(1.0, 3.0)], max_s=3.0) == [Span(1.0, 3.0)]
    assert windows([Span(0.0, 6.0)], max_s=3.0) == [Span(0.0, 3.0), Span(3.0, 6.0)]


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
