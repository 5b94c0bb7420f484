"""A diarized transcript's segments: timed by their words, cut where the speaker changes
inside one, and speakers numbered from 0 (A, B, ... in OpenAI's form) over exactly the
speakers the segments name. Pure: the turns stand in for a diarization."""

from __future__ import annotations

from deployments.asr.formats import render
from deployments.asr.transcript import Segment, Transcript, Word, split_by_speaker
from deployments.diarization.spans import Diarization, Turn, speaker_of

# Whisper's segment times are coarse (the 2.17-7.17 for a "Hello?" said at 6.51-7.03);
# its words' times are where the speech is.
HELLO = Segment(0, 2.17, 7.17, " Hello? Hi, it's me.", words=[
    Word(" Hello?", 6.51, 7.03), Word(" Hi,", 7.40, 7.62), Word(" it's", 7.70, 7.85), Word(" me.", 7.85, 8.10),
])  # fmt: skip
TURNS = [Turn(6.4, 7.1, 2), Turn(7.3, 8.2, 1)]  # cluster 2 says hello, cluster 1 answers


def turns_of(start: float, end: float):
    return speaker_of(start, end, TURNS)


def test_a_segment_is_timed_by_its_words():
    (one,) = split_by_speaker(HELLO, lambda start, end: 4)
    assert (one.start, one.end, one.speaker, one.text) == (6.51, 8.10, 4, HELLO.text)


def test_a_segment_is_cut_where_the_speaker_changes():
    first, second = split_by_speaker(HELLO, turns_of)
    assert (first.start, first.end, first.speaker, first.text.strip()) == (6.51, 7.03, 2, "Hello?")
    assert (second.start, second.end, second.speaker, second.text.strip()) == (7.40, 8.10, 1, "Hi, it's me.")
    assert (first.origin, first.part, second.origin, second.part) == (0, 0, 0, 1)


def test_a_segment_without_words_keeps_its_times():
    plain = Segment(3, 1.0, 2.0, " Yes.")
    (one,) = split_by_speaker(plain, lambda start, end: 1 if (start, end) == (1.0, 2.0) else None)
    assert (one.start, one.end, one.speaker, one.origin) == (1.0, 2.0, 1, 3)


def diarized(turns: list[Turn], labels: list[str], known=frozenset()) -> Transcript:
    bye = Segment(0, 9.0, 10.0, " Bye.", words=[Word(" Bye.", 9.2, 9.6)])
    t = Transcript.join([HELLO, bye], "en", 10.0)
    d = Diarization(turns, labels, 10.0, known)
    t.label_speakers(d.speaker_of, d.labels_of)
    return t


def test_speakers_are_the_labels_the_segments_carry_numbered_from_0():
    # Three clusters, of which the segments name two (1 and 2): the answer has 2 speakers, 0 and 1.
    t = diarized(TURNS + [Turn(9.1, 9.7, 2), Turn(20.0, 21.0, 0)], ["A", "B", "C"])
    assert [(s.id, s.speaker) for s in t.segments] == [(0, 0), (1, 1), (2, 0)]
    assert t.speaker_labels == ["A", "B"]
    verbose, _ = render(t, "verbose_json")
    assert verbose["speakers"] == len({s["speaker"] for s in verbose["segments"]}) == 2
    assert [s["start"] for s in verbose["segments"]] == [6.51, 7.40, 9.2]
    body, _ = render(t, "diarized_json")
    assert [(s["id"], s["speaker"], s["start"], s["end"]) for s in body["segments"]] == [
        ("seg_0", "A", 6.51, 7.03),
        ("seg_0_1", "B", 7.40, 8.10),  # the second part of the decoded seg_0
        ("seg_1", "A", 9.2, 9.6),
    ]


def test_known_names_are_kept_and_unnamed_speakers_lettered_again():
    t = diarized(TURNS + [Turn(9.1, 9.7, 1)], ["A", "stella", "C"], frozenset({"stella"}))
    assert t.speaker_labels == ["A", "stella"]
    named = diarized(TURNS, ["A", "B", "C"], frozenset({"A"}))  # a known speaker called "A"
    assert named.speaker_labels == ["B", "C"]


def test_one_voice_is_one_speaker():
    t = diarized([Turn(6.0, 10.0, 3)], ["A", "B", "C", "D"])
    assert {s.speaker for s in t.segments} == {0} and t.speaker_labels == ["A"]
    assert len(t.segments) == 2  # nothing cut
