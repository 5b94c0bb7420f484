"""Log-probability shapes: token text from bytes, sorting and clamping, the legacy completions
columns with their text offsets, and how a stream's chunks of n choices are merged."""

from __future__ import annotations

import json

from deployments.protocol.generation import GenerationChunk, collect_choices, merge_by_choice
from deployments.protocol.logprobs import (
    MIN_LOGPROB,
    CompletionLogprobShaper,
    TokenLogprob,
    token_logprob,
    token_text,
)
from deployments.protocol.openai import UsageInfo


def test_token_text_is_the_utf8_text_or_its_bytes_spelled_out():
    assert token_text(b" Paris") == " Paris"
    assert token_text("é".encode()) == "é"
    assert token_text("é".encode()[:1]) == "bytes:\\xc3"
    assert token_text(b"") == ""


def test_an_entry_sorts_its_alternatives_best_first_and_clamps_minus_infinity():
    e = token_logprob(b"b", -1.5, [(b"a", -2.0), (b"b", -1.5), (b"c", -0.5), (b"d", float("-inf"))], keep=3)
    assert [t.token for t in e.top_logprobs] == ["c", "b", "a"]
    assert e.bytes == [98] and e.top_logprobs[0].bytes == [99]
    masked = token_logprob(b"x", float("-inf"), [(b"y", float("nan"))])
    assert masked.logprob == MIN_LOGPROB and masked.top_logprobs[0].logprob == MIN_LOGPROB
    json.dumps(masked.model_dump())  # no -Infinity, no NaN: valid JSON
    assert token_logprob(b"x", -1.0, [(b"x", -1.0)], keep=0).top_logprobs == []


def entry(text: bytes, logprob: float, *top: tuple[bytes, float]) -> TokenLogprob:
    return token_logprob(text, logprob, list(top))


def test_completion_columns_keep_the_chosen_token_among_the_top_and_count_characters():
    e_acute = "é".encode()
    entries = [
        entry(b"Hi", -0.1, (b"Hi", -0.1), (b"Ho", -2.5)),
        entry(e_acute[:1], -0.2, (b"!", -0.1)),  # half a character
        entry(e_acute[1:], -0.3),
        entry(b" there", -4.0, (b" you", -1.0)),
    ]
    shaper = CompletionLogprobShaper(start=5)  # after an echoed 5-character prompt
    first = shaper.shape(entries[:2])
    rest = shaper.shape(entries[2:])  # a later chunk continues the offsets
    assert first.tokens == ["Hi", "bytes:\\xc3"] and rest.tokens == ["bytes:\\xa9", " there"]
    assert first.token_logprobs == [-0.1, -0.2]
    assert first.top_logprobs == [{"Hi": -0.1, "Ho": -2.5}, {"!": -0.1, "bytes:\\xc3": -0.2}]
    assert list(rest.top_logprobs[1]) == [" you", " there"]  # best first, the chosen one last
    # "Hi" at 5, "é" starts at 7 (both its halves), " there" at 8.
    assert first.text_offset + rest.text_offset == [5, 7, 7, 8]


def test_chunks_of_several_choices_merge_per_choice_in_order():
    a = [GenerationChunk(index=0, content="a", logprobs=[entry(b"a", -1.0)]), GenerationChunk(index=0, content="b")]
    b = [GenerationChunk(index=1, content="x")]
    usage = UsageInfo(prompt_tokens=3, completion_tokens=3, total_tokens=6)
    last = GenerationChunk(index=0, finish_reason="stop", usage=usage)
    merged = merge_by_choice([*a, *b, last])
    assert [(c.index, c.content) for c in merged] == [(0, "ab"), (1, "x"), (0, "")]
    assert merged[0].logprobs[0].token == "a" and merged[1].logprobs is None
    assert merged[-1].usage is usage
    choices, total = collect_choices([*b, *a, GenerationChunk(index=1, finish_reason="length"), last])
    assert list(choices) == [0, 1] and total is usage
    assert (choices[0].content, choices[0].finish_reason) == ("ab", "stop")
    assert (choices[1].content, choices[1].finish_reason) == ("x", "length")
    assert len(choices[0].logprobs) == 1


def test_a_merge_keeps_logprobs_absent_when_none_were_asked_for():
    assert GenerationChunk(content="a").merge(GenerationChunk(content="b")).logprobs is None
    asked = GenerationChunk(content="a", logprobs=[]).merge(GenerationChunk(content="b"))
    assert asked.logprobs == []
