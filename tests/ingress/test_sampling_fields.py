"""logprobs, n and seed at the ingress, and the review of every OpenAI request field: the
response shapes (JSON and SSE) from a slot stream of n choices with log-probabilities; each
field refused with a 400 naming it before any slot call; the fields accepted and ignored."""

from __future__ import annotations

import json
from typing import Optional

import pytest

from deployments.protocol.generation import GenerationChunk
from deployments.protocol.logprobs import token_logprob
from deployments.protocol.openai import UsageInfo
from tests.assertions import assert_openai_error

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HELLO = [{"role": "user", "content": "hi"}]


def entry(text: str, logprob: float):
    return token_logprob(text.encode(), logprob, [(text.encode(), logprob), (b"zz", logprob - 1)])


def choices_answer(texts: list[list[str]], with_logprobs: bool = True):
    """A slot stream of len(texts) choices, interleaved one token at a time, each token with its
    entry; each choice's last chunk has its finish reason, the stream's last the usage."""

    def answer(request, *images, model: Optional[str] = None) -> list[GenerationChunk]:
        chunks = []
        for step in range(max(len(t) for t in texts)):
            for index, tokens in enumerate(texts):
                if step < len(tokens):
                    lp = [entry(tokens[step], -0.5 - step)] if with_logprobs else None
                    chunks.append(GenerationChunk(index=index, content=tokens[step], logprobs=lp))
        for index in range(len(texts)):
            chunks.append(GenerationChunk(index=index, finish_reason="length", logprobs=[] if with_logprobs else None))
        completion = sum(len(t) for t in texts)
        chunks[-1].usage = UsageInfo(prompt_tokens=4, completion_tokens=completion, total_tokens=4 + completion)
        chunks[0].model = model or "ominix-tiny-qwen3"
        return chunks

    return answer


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_chat_logprobs_and_n_come_back_in_openai_shape(http, slots):
    slots["llm"].answers["chat"] = choices_answer([["Hel", "lo"], ["Hi"]])
    r = await http.post(CHAT, json={"messages": HELLO, "n": 2, "logprobs": True, "top_logprobs": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in body["choices"]] == ["Hello", "Hi"]
    content = body["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == ["Hel", "lo"]
    assert content[0] == {
        "token": "Hel",
        "logprob": -0.5,
        "bytes": list(b"Hel"),
        "top_logprobs": [
            {"token": "Hel", "logprob": -0.5, "bytes": list(b"Hel")},
            {"token": "zz", "logprob": -1.5, "bytes": list(b"zz")},
        ],
    }
    assert body["choices"][0]["logprobs"]["refusal"] is None
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    request = slots["llm"].calls[0][1][0]
    assert (request.choice_count(), request.logprob_count()) == (2, 2)


async def test_chat_without_logprobs_keeps_logprobs_null(http, slots):
    slots["llm"].answers["chat"] = choices_answer([["a"]], with_logprobs=False)
    body = (await http.post(CHAT, json={"messages": HELLO})).json()
    assert body["choices"][0]["logprobs"] is None and body["choices"][0]["index"] == 0


async def test_a_chat_stream_of_n_choices_names_each_choice_and_carries_logprobs(http, slots):
    slots["llm"].answers["chat"] = choices_answer([["Hel", "lo"], ["Hi"]])
    r = await http.post(
        CHAT,
        json={
            "messages": HELLO,
            "n": 2,
            "logprobs": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = sse_events(r.text)
    assert r.text.endswith("data: [DONE]\n\n")
    roles = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["delta"].get("role")]
    assert [c["index"] for c in roles] == [0, 1]
    text = {0: "", 1: ""}
    tokens = {0: [], 1: []}
    finishes = {}
    for e in events:
        for c in e["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
            tokens[c["index"]] += [t["token"] for t in (c["logprobs"] or {}).get("content") or []]
            if c["finish_reason"]:
                finishes[c["index"]] = c["finish_reason"]
    assert text == {0: "Hello", 1: "Hi"} and tokens == {0: ["Hel", "lo"], 1: ["Hi"]}
    assert finishes == {0: "length", 1: "length"}
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 3


async def test_completion_logprobs_are_the_legacy_columns(http, slots):
    slots["llm"].answers["completions"] = choices_answer([["Once", " upon"]])
    body = (await http.post(COMPLETIONS, json={"prompt": "x", "logprobs": 1})).json()
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs == {
        "tokens": ["Once", " upon"],
        "token_logprobs": [-0.5, -1.5],
        "top_logprobs": [{"Once": -0.5, "zz": -1.5}, {" upon": -1.5, "zz": -2.5}],
        "text_offset": [0, 4],
    }


async def test_a_completion_stream_of_n_choices_with_echo_and_offsets(http, slots):
    slots["llm"].answers["completions"] = choices_answer([["A", "B"], ["C"]], with_logprobs=False)
    r = await http.post(COMPLETIONS, json={"prompt": "Say:", "n": 2, "echo": True, "stream": True})
    texts = {0: "", 1: ""}
    for e in sse_events(r.text):
        for c in e["choices"]:
            texts[c["index"]] += c["text"]
    assert texts == {0: "Say:AB", 1: "Say:C"}
    slots["llm"].answers["completions"] = choices_answer([["A", "B"]])
    r = await http.post(COMPLETIONS, json={"prompt": "Say:", "logprobs": 0, "stream": True})
    offsets = [
        o for e in sse_events(r.text) for c in e["choices"] for o in (c["logprobs"] or {}).get("text_offset", [])
    ]
    assert offsets == [0, 1]


async def test_a_completion_without_max_tokens_is_given_openais_default(http, slots):
    await http.post(COMPLETIONS, json={"prompt": "x"})
    await http.post(CHAT, json={"messages": HELLO})
    completion, chat = slots["llm"].calls[0][1][0], slots["llm"].calls[1][1][0]
    assert (completion.token_budget(), completion.default_max_tokens) == (None, 16)
    assert chat.default_max_tokens is None  # the slot's llm.default_max_tokens


@pytest.mark.parametrize(
    "route, extra, param",
    [
        (CHAT, {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        (CHAT, {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
        (CHAT, {"top_logprobs": 2}, "top_logprobs"),
        (CHAT, {"logprobs": "yes"}, "logprobs"),
        (CHAT, {"n": 9}, "n"),
        (CHAT, {"n": 0}, "n"),
        (CHAT, {"n": True}, "n"),
        (CHAT, {"seed": 2**64}, "seed"),
        (CHAT, {"seed": "7"}, "seed"),
        (CHAT, {"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        (CHAT, {"modalities": ["text", "audio"]}, "modalities"),
        (CHAT, {"functions": [{"name": "f"}]}, "functions"),
        (CHAT, {"function_call": "auto"}, "function_call"),
        (CHAT, {"web_search_options": {}}, "web_search_options"),
        (CHAT, {"moderation": {"model": "m"}}, "moderation"),
        (CHAT, {"verbosity": "low"}, "verbosity"),
        (CHAT, {"messages": [*HELLO, {"role": "tool", "tool_call_id": "c1"}]}, "messages.1"),
        (CHAT, {"messages": [*HELLO, {"role": "tool", "content": "42"}]}, "messages.1"),
        (COMPLETIONS, {"logprobs": 6}, "logprobs"),
        (COMPLETIONS, {"logprobs": True}, "logprobs"),
        (COMPLETIONS, {"n": 9}, "n"),
        (COMPLETIONS, {"best_of": 3}, "best_of"),
        (COMPLETIONS, {"echo": True, "logprobs": 1}, "echo"),
        (COMPLETIONS, {"prompt": [1, 2], "echo": True}, "echo"),
        (COMPLETIONS, {"prompt": [False]}, None),
        (COMPLETIONS, {"prompt": [1, True]}, None),
    ],
)
async def test_fields_not_served_are_a_400_naming_them_before_any_slot_call(http, slots, route, extra, param):
    body = {"messages": HELLO} if route == CHAT else {"prompt": "x"}
    r = await http.post(route, json={**body, **extra})
    error = assert_openai_error(r, 400, param)
    if param is None:
        assert error["param"].startswith("prompt")
    assert not slots["llm"].calls


@pytest.mark.parametrize(
    "extra",
    [
        {"metadata": {"k": "v"}, "store": True, "service_tier": "auto", "user": "u", "safety_identifier": "s"},
        {"prediction": {"type": "content", "content": "x"}, "prompt_cache_retention": "24h"},
        {"prompt_cache_options": {"mode": "implicit"}, "stream_options": {"include_obfuscation": False}},
        {"modalities": ["text"], "seed": -3, "n": 8, "logprobs": False, "some_vendor_field": 1},
    ],
)
async def test_fields_meaningless_here_are_accepted(http, slots, extra):
    r = await http.post(CHAT, json={"messages": HELLO, **extra})
    assert r.status_code == 200, r.text
    assert slots["llm"].calls


async def test_the_n_limit_is_the_slots_configured_one(slots, tmp_path):
    import httpx

    from deployments.ingress.app import create_app
    from graphs.config import GraphArgs
    from tests.ingress.conftest import ingress_state, shipped_args

    args = shipped_args(cache_dir=str(tmp_path))
    args["llm"] = {**args["llm"], "max_n": 2}
    app = create_app(ingress_state(GraphArgs.from_args(args, environ={}), slots))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        error = assert_openai_error(await http.post(CHAT, json={"messages": HELLO, "n": 3}), 400, "n")
        assert "at most 2" in error["message"]
        assert (await http.post(CHAT, json={"messages": HELLO, "n": 2})).status_code == 200


@pytest.mark.parametrize("extra, param", [({"n": 5}, "n"), ({"reasoning_effort": "low"}, "reasoning_effort")])
async def test_a_vision_model_refuses_what_it_cannot_serve(http, slots, extra, param):
    r = await http.post(CHAT, json={"model": "ominix-tiny-qwen2-vl", "messages": HELLO, **extra})
    assert param == "reasoning_effort" or "vlm.max_n" in assert_openai_error(r, 400, param)["message"]
    assert not slots["vlm"].calls


async def test_a_vision_model_is_asked_for_logprobs_and_choices(http, slots):
    body = {"model": "ominix-tiny-qwen2-vl", "messages": HELLO, "logprobs": True, "top_logprobs": 2, "n": 4}
    assert (await http.post(CHAT, json=body)).status_code == 200
    (request, _images) = slots["vlm"].calls[-1][1]
    assert request.logprob_count() == 2 and request.choice_count() == 4
