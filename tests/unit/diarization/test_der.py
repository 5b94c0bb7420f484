"""The diarization error rate against cases worked out by hand (pyannote.metrics' definition:
missed + false alarm + confusion over total reference speech, optimal one-to-one mapping)."""

from __future__ import annotations

import pytest

from tests.der import der_components, diarization_error_rate, optimal_mapping

REF = [(0.0, 4.0, "alice"), (5.0, 9.0, "bob")]  # 8 s of speech


def test_perfect_answer_under_other_names_is_zero():
    assert diarization_error_rate(REF, [(0.0, 4.0, "B"), (5.0, 9.0, "A")]) == 0.0
    assert optimal_mapping(REF, [(0.0, 4.0, "B"), (5.0, 9.0, "A")]) == {"B": "alice", "A": "bob"}


def test_missed_speech():
    # bob's last second is not found: 1 s missed of 8.
    c = der_components(REF, [(0.0, 4.0, "A"), (5.0, 8.0, "B")])
    assert (c.missed, c.false_alarm, c.confusion, c.total) == pytest.approx((1.0, 0.0, 0.0, 8.0))
    assert c.der == pytest.approx(1 / 8)


def test_false_alarm():
    # speech claimed in the 1 s pause: 1 s false alarm of 8.
    c = der_components(REF, [(0.0, 4.5, "A"), (4.5, 9.0, "B")])
    assert (c.missed, c.false_alarm, c.confusion) == pytest.approx((0.0, 1.0, 0.0))
    assert c.der == pytest.approx(1 / 8)


def test_confusion_after_the_best_mapping():
    # One label for everyone: it maps to one speaker (4 s each, either), the other 4 s are confused.
    assert diarization_error_rate(REF, [(0.0, 4.0, "A"), (5.0, 9.0, "A")]) == pytest.approx(4 / 8)
    # bob split in two: the larger part (3 s) maps, the other 1 s is confusion.
    c = der_components(REF, [(0.0, 4.0, "A"), (5.0, 8.0, "B"), (8.0, 9.0, "C")])
    assert (c.missed, c.false_alarm, c.confusion) == pytest.approx((0.0, 0.0, 1.0))


def test_overlapped_speech_counts_each_speaker():
    ref = [(0.0, 4.0, "alice"), (2.0, 6.0, "bob")]  # 2 s of overlap: 8 s of speaker time
    # One speaker found over the whole 6 s: 2 s missed in the overlap, and of the 4 s the
    # label maps to (alice), bob's 2 s alone are confusion.
    c = der_components(ref, [(0.0, 6.0, "A")])
    assert (c.missed, c.false_alarm, c.confusion, c.total) == pytest.approx((2.0, 0.0, 2.0, 8.0))
    assert c.der == pytest.approx(0.5)


def test_mixed_errors_add_up():
    # missed 0.5 (alice's first half second), false alarm 0.5 (in the pause), confusion 1 (bob's end as alice).
    hyp = [(0.5, 4.5, "X"), (5.0, 8.0, "Y"), (8.0, 9.0, "X")]
    c = der_components(REF, hyp)
    assert (c.missed, c.false_alarm, c.confusion) == pytest.approx((0.5, 0.5, 1.0))
    assert c.der == pytest.approx(2 / 8)


def test_empty_cases():
    assert diarization_error_rate([], []) == 0.0
    assert diarization_error_rate(REF, []) == 1.0  # everything missed
    assert der_components([], [(0.0, 1.0, "A")]).der == float("inf")  # false alarm over no speech
