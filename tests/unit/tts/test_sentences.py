"""Sentence splitting as OminiX-API splits text for its Qwen3-TTS routes and WebSocket TTS."""

import pytest

from deployments.tts.sentences import clean, merge_pieces, split_pieces, split_sentences


def test_splits_after_ascii_punctuation_followed_by_space():
    assert split_sentences("Hello world. How are you? I am fine, thanks!") == [
        "Hello world.",
        "How are you?",
        "I am fine, thanks!",
    ]


def test_no_split_inside_numbers_or_abbreviation_runs():
    assert split_pieces("Version 1.5 is out.It works") == ["Version 1.5 is out.It works"]


def test_cjk_marks_always_split():
    assert split_pieces("你好。今天天气很好！我们去公园吧？") == ["你好。", "今天天气很好！", "我们去公园吧？"]


def test_newlines_split():
    assert split_pieces("first line\nsecond line") == ["first line", "second line"]


def test_short_pieces_merge_until_ten_chars():
    assert merge_pieces(["Hi.", "Ok.", "Go on then."]) == ["Hi. Ok. Go on then."]
    assert merge_pieces(["A long sentence.", "Tail."]) == ["A long sentence. Tail."]
    assert merge_pieces(["Hi."]) == ["Hi."]


def test_symbols_are_removed():
    assert clean("【注意】 *bold* #tag 😀 (ok) — “q”") == "注意 bold tag  (ok) — “q”"


@pytest.mark.parametrize("text", ["", "   ", "*** ### 😀", "\n\n"])
def test_nothing_to_say_gives_no_segments(text):
    assert split_sentences(text) == []
