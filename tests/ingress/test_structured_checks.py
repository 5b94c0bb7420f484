"""Check-and-retry at the ingress, in process (deployments/ingress/serving/structured.py): a
finished structured answer that fails its JSON Schema as sent is resampled with another seed
within `llm.schema_attempts`, never returned as valid; a streamed answer whose schema needs the
check is held back until it passes; n choices are checked one by one; usage counts every attempt;
the Responses and Messages APIs get the same check. The fake slot answers a scripted sequence of
attempts, so every path is taken on purpose."""

from __future__ import annotations

import json
from typing import Optional

import pytest

from deployments.llm.answer_check import RETRY_TEMPERATURE, SCHEMA_NOT_MET
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, ToolCall, UsageInfo

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]
UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}  # left to the check
EXACT = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}  # the grammar is the schema
ATTEMPTS = 4  # llm.schema_attempts in the shipped config
MODEL = "ominix-smollm2-135m-instruct"


def json_schema(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}


def scripted(*attempts: list, finish: str = "stop"):
    """A fake slot that answers its k-th call with `attempts[k]`: one text per choice of that call
    (each split in two chunks), then a finish per choice and the usage (3 prompt tokens, one
    completion token per character) on the last chunk."""
    calls: list = []

    def answer(request, model: Optional[str] = None) -> list[GenerationChunk]:
        texts = attempts[min(len(calls), len(attempts) - 1)]
        calls.append(request)
        assert len(texts) == request.choice_count()
        chunks = []
        for i, text in enumerate(texts):
            half = len(text) // 2
            chunks += [GenerationChunk(index=i, content=text[:half]), GenerationChunk(index=i, content=text[half:])]
        chunks[0].model = model or MODEL
        chunks += [GenerationChunk(index=i, finish_reason=finish) for i in range(len(texts))]
        tokens = sum(len(t) for t in texts)
        chunks[-1].usage = UsageInfo(prompt_tokens=3, completion_tokens=tokens, total_tokens=3 + tokens)
        return chunks

    answer.calls = calls
    return answer


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


async def test_an_answer_that_fails_its_schema_is_resampled_until_it_passes(http, slots, state):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]"], ["[2, 2]"], ["[1, 2]"])
    r = await http.post(CHAT, json={"messages": MSG, "temperature": 0, "response_format": json_schema(UNIQUE)})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"]) == ("[1, 2]", "stop")
    assert len(answer.calls) == 3
    # usage: every token generated (the rejected attempts' too), the prompt once
    assert r.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 18, "total_tokens": 21}
    assert state.metrics.summary()["schema_checks"][MODEL] == {
        "valid": 1,
        "resampled": 2,
        "not_met": 0,
        "cut": 0,
    }


async def test_a_greedy_request_resamples_at_a_small_temperature_with_seeds_of_its_own(http, slots):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]"], ["[1, 1]"], ["[3]"])
    body = {"messages": MSG, "temperature": 0, "response_format": json_schema(UNIQUE)}
    assert (await http.post(CHAT, json=body)).json()["choices"][0]["message"]["content"] == "[3]"
    first, *retries = answer.calls
    assert (first.temperature, first.seed) == (0, None)
    assert [r.temperature for r in retries] == [RETRY_TEMPERATURE] * 2
    seeds = [r.seed for r in retries]
    assert None not in seeds and len(set(seeds)) == 2
    answer.calls.clear()
    await http.post(CHAT, json=body)  # the same request resamples the same way: reproducible
    assert [r.seed for r in answer.calls[1:]] == seeds


async def test_a_sampled_request_resamples_with_another_seed_or_none(http, slots):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]"], ["[3]"])
    body = {"messages": MSG, "temperature": 0.9, "seed": 42, "response_format": json_schema(UNIQUE)}
    await http.post(CHAT, json=body)
    assert [(r.temperature, r.seed != 42) for r in answer.calls] == [(0.9, False), (0.9, True)]
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]"], ["[3]"])
    await http.post(CHAT, json={**body, "seed": None})
    assert [r.seed for r in answer.calls] == [None, None]  # it sampled at random: so does the retry


async def test_an_answer_that_never_passes_is_withheld_and_says_so(http, slots, state):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]"])
    r = await http.post(CHAT, json={"messages": MSG, "response_format": json_schema(UNIQUE)})
    assert r.status_code == 200
    choice = r.json()["choices"][0]
    assert (choice["message"].get("content"), choice["finish_reason"]) == (None, SCHEMA_NOT_MET)
    assert len(answer.calls) == ATTEMPTS
    checks = state.metrics.summary()["schema_checks"][MODEL]
    assert (checks["resampled"], checks["not_met"]) == (ATTEMPTS - 1, 1)


async def test_an_answer_cut_by_max_tokens_is_not_resampled(http, slots, state):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1"], finish="length")
    r = await http.post(CHAT, json={"messages": MSG, "response_format": json_schema(UNIQUE)})
    assert r.json()["choices"][0]["finish_reason"] == "length" and len(answer.calls) == 1
    assert state.metrics.summary()["schema_checks"][MODEL]["cut"] == 1


async def test_n_choices_are_checked_one_by_one_and_only_the_failed_resampled(http, slots):
    slots["llm"].answers["chat"] = answer = scripted(["[1, 1]", "[4, 5]", "[6, 6]"], ["[7]", "[8]"])
    r = await http.post(CHAT, json={"messages": MSG, "n": 3, "seed": 5, "response_format": json_schema(UNIQUE)})
    choices = {c["index"]: c["message"]["content"] for c in r.json()["choices"]}
    assert choices == {0: "[7]", 1: "[4, 5]", 2: "[8]"}  # the retry's two choices back in their places
    assert [r.choice_count() for r in answer.calls] == [3, 2]


async def test_a_streamed_answer_that_needs_the_check_is_held_until_it_passes(http, slots):
    slots["llm"].answers["chat"] = scripted(["[1, 1]"], ["[1, 2]"])
    body = {"messages": MSG, "stream": True, "stream_options": {"include_usage": True}}
    r = await http.post(CHAT, json={**body, "response_format": json_schema(UNIQUE)})
    events = sse_events(r.text)
    content = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
    assert "".join(c for c in content if c) == "[1, 2]"  # the rejected answer never went out
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "stop"
    assert events[-1]["usage"]["completion_tokens"] == 12
    assert r.text.rstrip().endswith("data: [DONE]")


async def test_a_streamed_answer_the_grammar_fully_enforces_streams_and_is_still_checked(http, slots):
    """The grammar is the whole schema: its text goes out as it is generated. An answer that fails
    anyway (here the fake's; with llguidance it cannot happen) is not resampled, it cannot be taken
    back, and its end says it failed."""
    slots["llm"].answers["chat"] = answer = scripted(["[1, 2, 3, 4]"])
    body = {"messages": MSG, "stream": True, "response_format": json_schema(EXACT)}
    events = sse_events((await http.post(CHAT, json=body)).text)
    deltas = [e["choices"][0]["delta"].get("content") for e in events if e["choices"]]
    assert [d for d in deltas if d] == ["[1, 2,", " 3, 4]"]  # as generated, chunk by chunk
    assert events[-1]["choices"][0]["finish_reason"] == SCHEMA_NOT_MET and len(answer.calls) == 1
    # Not streamed, the same failure is resampled: nothing had gone out.
    slots["llm"].answers["chat"] = answer = scripted(["[1, 2, 3, 4]"], ["[1]"])
    r = await http.post(CHAT, json={**body, "stream": False})
    assert r.json()["choices"][0]["message"]["content"] == "[1]" and len(answer.calls) == 2


async def test_text_completions_are_checked_too(http, slots):
    slots["llm"].answers["completions"] = answer = scripted(["[1, 1]"], ["[0]"])
    r = await http.post(COMPLETIONS, json={"prompt": "x", "best_of": 1, "response_format": json_schema(UNIQUE)})
    assert r.json()["choices"][0]["text"] == "[0]"
    assert answer.calls[1].best_of is None


def calls(*arguments: str):
    """A fake slot whose k-th answer is a call of `pick` with `arguments[k]`."""
    made: list = []

    def answer(request, model=None):
        args = arguments[min(len(made), len(arguments) - 1)]
        made.append(request)
        call = ToolCall(id=f"call_{len(made)}", function=FunctionCall(name="pick", arguments=args))
        usage = UsageInfo(prompt_tokens=3, completion_tokens=5, total_tokens=8)
        return [
            GenerationChunk(model=model, tool_calls=[call]),
            GenerationChunk(finish_reason="tool_calls", usage=usage),
        ]

    answer.calls = made
    return answer


PICK = {
    "type": "function",
    "function": {
        "name": "pick",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"ids": UNIQUE},
            "required": ["ids"],
            "additionalProperties": False,
        },
    },
}


async def test_tool_call_arguments_are_checked_against_the_tools_parameters(http, slots):
    slots["llm"].answers["chat"] = answer = calls('{"ids": [2, 2]}', '{"ids": [2, 3]}')
    r = await http.post(CHAT, json={"messages": MSG, "tools": [PICK], "tool_choice": "required"})
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"ids": [2, 3]}
    assert len(answer.calls) == 2


async def test_the_responses_api_gets_the_same_check(http, slots):
    slots["llm"].answers["chat"] = scripted(["[1, 1]"], ["[5, 6]"])
    fmt = {"type": "json_schema", "name": "answer", "schema": UNIQUE, "strict": True}
    r = await http.post("/v1/responses", json={"input": "hi", "text": {"format": fmt}, "store": False})
    (message,) = r.json()["output"]
    assert message["content"][0]["text"] == "[5, 6]" and r.json()["status"] == "completed"
    slots["llm"].answers["chat"] = scripted(["[1, 1]"])
    r = await http.post("/v1/responses", json={"input": "hi", "text": {"format": fmt}, "store": False})
    body = r.json()
    assert (body["status"], body["incomplete_details"]) == ("incomplete", {"reason": SCHEMA_NOT_MET})
    assert body["output"][0]["status"] == "incomplete" and "[1, 1]" not in r.text


async def test_anthropic_messages_get_the_same_check(http, slots):
    slots["llm"].answers["chat"] = scripted(["[1, 1]"], ["[5, 6]"])
    body = {
        "model": "ominix-smollm2-135m-instruct",
        "max_tokens": 64,
        "messages": MSG,
        "output_config": {"format": {"type": "json_schema", "schema": UNIQUE}},
    }
    r = await http.post("/v1/messages", json=body)
    assert r.json()["content"][0]["text"] == "[5, 6]" and r.json()["stop_reason"] == "end_turn"
    slots["llm"].answers["chat"] = scripted(["[1, 1]"])
    r = await http.post("/v1/messages", json=body)
    assert r.json()["stop_reason"] == "refusal"  # Anthropic's: the output may not match the schema
    assert "[1, 1]" not in r.text


async def test_the_checks_are_in_the_prometheus_exposition(http, slots):
    slots["llm"].answers["chat"] = scripted(["[1, 1]"], ["[1]"])
    await http.post(CHAT, json={"messages": MSG, "response_format": json_schema(UNIQUE)})
    text = (await http.get("/metrics", params={"format": "prometheus"})).text
    for result in ("resampled", "valid"):
        assert f'ominix_ingress_schema_checks_total{{model="{MODEL}",result="{result}"}} 1.0' in text


@pytest.mark.parametrize("stream", [False, True])
async def test_a_schema_left_partly_to_the_check_is_served_not_refused(http, slots, stream):
    """What llguidance does not implement was a 400 (JSONSchemaBench: 19 % of a sample declined)."""
    schemas = [
        {"type": "object", "properties": {"a": {}}, "not": {"required": ["b"]}},
        {"properties": {"a": {"type": "integer"}}, "if": {"required": ["a"]}, "then": {"required": ["a"]}},
        {"properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}},
        {"oneOf": [{"type": "object"}, {"type": "object", "properties": {"c": {}}, "required": ["c"]}]},
        {"type": "string", "format": "regex"},
        {"type": "object", "properties": {"a": {}}, "required": ["a", "b"]},
    ]
    answers = ['{"a": 1}', '{"a": 1}', '{"a": 1, "b": 2}', '{"d": 1}', '"^a+$"', '{"a": 1, "b": 2}']
    for schema, text in zip(schemas, answers):
        slots["llm"].answers["chat"] = scripted([text])
        r = await http.post(CHAT, json={"messages": MSG, "stream": stream, "response_format": json_schema(schema)})
        assert r.status_code == 200, (schema, r.text)
        if stream:
            events = [e["choices"][0] for e in sse_events(r.text) if e["choices"]]
            content = "".join(e["delta"].get("content") or "" for e in events)
            finish = events[-1]["finish_reason"]
        else:
            content, finish = r.json()["choices"][0]["message"]["content"], r.json()["choices"][0]["finish_reason"]
        assert (content, finish) == (text, "stop"), schema
