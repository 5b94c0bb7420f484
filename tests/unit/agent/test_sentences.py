"""The agent's sentence splitter: sentences come out as soon as their end is certain."""

from collections.abc import Iterable

import pytest

from deployments.agent.sentences import SentenceSplitter, sentences_of, speakable


def split_all(deltas: Iterable[str], **limits: int) -> list[str]:
    """Every sentence of a whole stream of deltas."""
    splitter = SentenceSplitter(**limits)
    sentences = [s for delta in deltas for s in splitter.feed(delta)]
    return sentences + splitter.flush()


def test_a_sentence_is_cut_once_the_text_after_it_is_seen():
    splitter = SentenceSplitter()
    assert splitter.feed("The capital of France is Paris.") == []  # "Paris.com"? not yet known
    assert splitter.feed(" It is") == ["The capital of France is Paris."]
    assert splitter.feed(" big!\n") == ["It is big!"]
    assert splitter.flush() == []


def test_token_by_token_gives_the_same_sentences_as_whole_text():
    text = "Hello there, my friend. How are you today? I am fine! Thanks for asking…  Bye now."
    expected = ["Hello there, my friend.", "How are you today?", "I am fine!", "Thanks for asking…", "Bye now."]
    assert split_all([text]) == expected
    assert split_all(list(text)) == expected  # one character per delta
    assert split_all(text.split(" ")[i] + " " for i in range(len(text.split(" ")))) == expected


def test_numbers_abbreviations_and_urls_do_not_end_a_sentence():
    text = "Pi is 3.14 or so. Dr. Smith, e.g. the dentist, lives at example.com today. Done."
    assert split_all(list(text)) == [
        "Pi is 3.14 or so.",
        "Dr. Smith, e.g. the dentist, lives at example.com today.",
        "Done.",
    ]


def test_short_pieces_join_the_next_sentence():
    assert split_all(["Sure! The capital is Paris. ", "1. Apples are red."]) == [
        "Sure! The capital is Paris.",
        "1. Apples are red.",
    ]


def test_closing_quotes_and_brackets_stay_with_their_sentence():
    assert split_all(list('He said "stop right there." Then she left (it was late.) Next day')) == [
        'He said "stop right there."',
        "Then she left (it was late.)",
        "Next day",
    ]


def test_line_breaks_end_a_piece_even_without_punctuation():
    assert split_all(["- first item here\n- second item here\n\n## Heading"]) == [
        "- first item here",
        "- second item here",
        "## Heading",
    ]


def test_cjk_sentence_marks_cut_without_a_space():
    assert split_all(list("今天天气很好，我们去公园散步吧。好的，我马上就来！")) == [
        "今天天气很好，我们去公园散步吧。",
        "好的，我马上就来！",
    ]


def test_a_run_on_is_cut_at_a_clause_break_then_at_a_space():
    words = " ".join(["word"] * 30)  # 149 characters, no punctuation
    run_on = f"{words}, {words} {words}"
    sentences = split_all(list(run_on), max_chars=200)
    assert sentences[0] == words + ","
    assert all(len(s) <= 200 for s in sentences)
    assert " ".join(sentences) == run_on


def test_no_text_no_sentence():
    assert split_all([]) == []
    assert split_all(["   ", "\n\n"]) == []


def test_limits_are_checked():
    with pytest.raises(ValueError):
        SentenceSplitter(min_chars=50, max_chars=40)


def test_speakable_needs_a_letter_or_digit():
    assert speakable("Hi.") and speakable("42") and speakable("好")
    assert not speakable("---") and not speakable("**") and not speakable("🙂")


async def test_the_async_splitter_closes_its_source_when_closed():
    closed = []

    async def deltas():
        try:
            yield "One whole sentence. "
            yield "Two whole sentences. "
            yield "Three"
        finally:
            closed.append(True)

    stream = sentences_of(deltas())
    assert await stream.__anext__() == "One whole sentence."
    await stream.aclose()
    assert closed == [True]


async def test_the_async_splitter_flushes_the_tail():
    async def deltas():
        for d in ["Hello the", "re. And the tail"]:
            yield d

    assert [s async for s in sentences_of(deltas())] == ["Hello there.", "And the tail"]
