"""logprobs, n and seed on the real graph with the default SmolLM2, through the openai SDK:
well-formed log-probabilities, n choices, the same text for the same seed (streamed or not),
and bad values refused with a 400 while the next request is served."""

from __future__ import annotations

import math

import openai
import pytest

DEFAULT = "ominix-smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Tell me a short story about a fox."}]


def test_chat_logprobs_are_well_formed(client):
    r = client.chat.completions.create(
        model=DEFAULT, messages=HELLO, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
    )
    content = r.choices[0].logprobs.content
    assert 1 <= len(content) <= 8
    for entry in content:
        values = [t.logprob for t in entry.top_logprobs]
        assert len(values) == 3 and values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1 + 1e-4
        assert entry.bytes == entry.top_logprobs[0].bytes  # greedy: the chosen token is the best
        assert abs(entry.logprob - values[0]) < 1e-4
    joined = b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace")
    assert joined.strip() == r.choices[0].message.content.strip()


def test_responses_logprobs_are_the_same_entries_as_chats(client):
    """The Responses API's `include: ["message.output_text.logprobs"]`: the same greedy answer
    as chat, with the same entries, on the output_text."""
    question = HELLO[0]["content"]
    chat = client.chat.completions.create(
        model=DEFAULT, messages=HELLO, max_tokens=8, temperature=0, logprobs=True, top_logprobs=2
    )
    r = client.responses.create(
        model=DEFAULT,
        input=question,
        max_output_tokens=8,
        temperature=0,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        store=False,
    )
    text = r.output[-1].content[0]
    assert text.text == chat.choices[0].message.content
    got, want = text.logprobs, chat.choices[0].logprobs.content
    assert [e.token for e in got] == [e.token for e in want] and len(got) >= 1
    assert [len(e.top_logprobs) for e in got] == [2] * len(got)
    # The second request may start from the first's prefix cache: equal up to float noise.
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(got, want))


def test_completion_logprobs_are_the_legacy_columns(client):
    r = client.completions.create(model=DEFAULT, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) >= 1
    assert all(token in top for token, top in zip(lp.tokens, lp.top_logprobs))
    assert lp.text_offset == sorted(lp.text_offset)


def test_n_gives_that_many_choices_streamed_or_not(client):
    r = client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=8, temperature=1.0, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert all(c.message.content for c in r.choices)
    texts = {0: "", 1: "", 2: ""}
    for chunk in client.chat.completions.create(
        model=DEFAULT, messages=HELLO, max_tokens=8, temperature=1.0, n=3, stream=True
    ):
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert all(texts.values())


def test_the_same_seed_gives_the_same_text_streamed_or_not(client):
    kw = dict(model=DEFAULT, messages=HELLO, max_tokens=12, temperature=1.0, seed=1234)
    first = client.chat.completions.create(**kw).choices[0].message.content
    again = client.chat.completions.create(**kw).choices[0].message.content
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(stream=True, **kw))
    assert first == again == streamed


@pytest.mark.parametrize(
    "extra, param",
    [({"n": 9}, "n"), ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"), ({"top_logprobs": 2}, "top_logprobs")],
)
def test_bad_values_are_400_and_the_next_request_is_served(client, extra, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=2, **extra)
    assert info.value.body["param"] == param
    assert client.chat.completions.create(model=DEFAULT, messages=HELLO, max_tokens=2).choices[0].message.content
