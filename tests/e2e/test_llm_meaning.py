"""What a user of the default LLM (SmolLM2-135M-Instruct) can judge: answers that are right,
continuations that make sense, the same text streamed or not. Greedy (temperature 0)
throughout, through the openai SDK against the session graph."""

from __future__ import annotations

import asyncio

DEFAULT = "ominix-smollm2-135m-instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def ask(client, messages, **kw):
    return client.chat.completions.create(
        messages=messages, temperature=0, **{"model": DEFAULT, "max_tokens": 32, **kw}
    )


def test_the_default_model_answers_a_factual_question(client, http):
    r = ask(client, QUESTION)
    assert r.model == DEFAULT
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"  # it ends its answer itself, well before max_tokens
    assert r.usage.completion_tokens < 32
    # A request that names no model (the SDK insists on one) gets the same answer from the default.
    raw = http.post("/v1/chat/completions", json={"messages": QUESTION, "temperature": 0, "max_tokens": 32})
    assert raw.status_code == 200 and raw.json()["model"] == DEFAULT
    assert raw.json()["choices"][0]["message"]["content"] == r.choices[0].message.content


def test_chat_answers_from_the_conversation_history(client):
    messages = [
        {"role": "user", "content": "My name is Alice. Please remember it."},
        {"role": "assistant", "content": "Nice to meet you, Alice! I will remember your name."},
        {"role": "user", "content": "What is my name?"},
    ]
    assert "Alice" in ask(client, messages).choices[0].message.content


def test_chat_answers_an_opposite(client):
    answer = ask(client, [{"role": "user", "content": "What is the opposite of hot?"}])
    assert "cold" in answer.choices[0].message.content.lower()


def test_a_completion_continues_the_text(client):
    r = client.completions.create(
        model=DEFAULT, prompt="The days of the week are Monday, Tuesday,", max_tokens=8, temperature=0
    )
    assert r.choices[0].text.split(",")[0].strip() == "Wednesday"


def test_streaming_gives_the_same_text_as_non_streaming(client):
    messages = [{"role": "user", "content": "Name three colors."}]
    full = ask(client, messages, max_tokens=24).choices[0].message.content
    chunks = list(ask(client, messages, max_tokens=24, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full
    assert sum(color in full for color in ("Red", "Blue", "Green", "Yellow")) >= 2

    prompt = "One, two, three, four,"
    text = client.completions.create(model=DEFAULT, prompt=prompt, max_tokens=6, temperature=0).choices[0].text
    pieces = client.completions.create(model=DEFAULT, prompt=prompt, max_tokens=6, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in pieces if c.choices) == text
    assert "five" in text


async def test_batched_requests_get_the_answers_they_get_alone(aclient):
    """Continuous batching must not change what a real model says."""
    questions = ["What is the capital of France?", "What is the opposite of hot?", "Name three colors."]

    async def answer(question):
        r = await aclient.chat.completions.create(
            model=DEFAULT, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
        )
        return r.choices[0].message.content

    alone = [await answer(q) for q in questions]
    together = await asyncio.gather(*(answer(q) for q in questions))
    assert list(together) == alone
    assert "Paris" in alone[0]
