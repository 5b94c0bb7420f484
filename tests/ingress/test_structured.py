"""Structured outputs at the ingress, in process: every request the grammar engine cannot serve
is a 400 with an OpenAI error body before any slot call (a schema llguidance cannot compile, a
json_schema without a schema, a forced tool that is not there); a vision model refuses
constrained decoding; what can be served reaches the LLM slot with its fields intact, as the
openai SDK's `parse` and LangChain's `with_structured_output` send it."""

from __future__ import annotations

import httpx
import pytest

from deployments.llm.constraints import Constraint
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, ToolCall, UsageInfo
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.structured import Household, Person

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MSG = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}
GOOD_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def schema_format(schema, **extra) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, **extra}}


REFUSED = [
    # (body fields, param, code)
    ({"response_format": {"type": "json_schema"}}, "response_format", None),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format", None),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": GOOD_SCHEMA}}}, None, None),
    ({"response_format": {"type": "xml"}}, None, None),
    ({"response_format": "json"}, "response_format", None),
    ({"response_format": schema_format({"type": "strin"})}, "response_format", "invalid_json_schema"),
    ({"response_format": schema_format({"$ref": "#/$defs/gone"})}, "response_format", "invalid_json_schema"),
    (
        {"response_format": schema_format({"$ref": "https://example.com/s.json"})},
        "response_format",
        "invalid_json_schema",
    ),
    ({"response_format": schema_format({"type": "string", "pattern": "(["})}, "response_format", "invalid_json_schema"),
    ({"response_format": schema_format([1, 2])}, None, None),
]
CHAT_REFUSED = [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", None),
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", None),
    ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, None, None),
    ({"tools": [WEATHER], "parallel_tool_calls": "sometimes"}, "parallel_tool_calls", None),
    (
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]},
        "tools[0].function.parameters",
        "invalid_json_schema",
    ),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fields, param, code", REFUSED + CHAT_REFUSED)
async def test_chat_constraints_that_cannot_be_served_are_400s_before_the_slot(
    http, slots, fields, param, code, stream
):
    slots["llm"].answers.clear()  # a call reaching the slot answers 418
    r = await http.post(CHAT, json={"messages": MSG, "stream": stream, **fields})
    error = assert_openai_error(r, 400, param, code)
    if code == "invalid_json_schema":
        assert "cannot be enforced" in error["message"]
    assert not slots["llm"].calls


@pytest.mark.parametrize("fields, param, code", REFUSED)
async def test_completion_constraints_that_cannot_be_served_are_400s(http, slots, fields, param, code):
    slots["llm"].answers.clear()
    r = await http.post(COMPLETIONS, json={"prompt": "hi", **fields})
    assert_openai_error(r, 400, param, code)
    assert not slots["llm"].calls


async def test_the_400_names_the_problem(http):
    r = await http.post(CHAT, json={"messages": MSG, "response_format": schema_format({"type": "strin"})})
    assert "strin" in r.json()["error"]["message"]
    tools = {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}
    r = await http.post(CHAT, json={"messages": MSG, **tools})
    assert "'nope'" in r.json()["error"]["message"] and "get_weather" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "fields",
    [
        {"response_format": {"type": "json_object"}},
        {"response_format": schema_format(GOOD_SCHEMA, strict=True)},
        {"response_format": {"type": "text"}},
        {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False},
        {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tools": [WEATHER], "tool_choice": "auto"},
        {"tools": [WEATHER], "tool_choice": "none"},
    ],
)
async def test_what_can_be_served_reaches_the_slot_intact(http, slots, fields):
    if "response_format" in fields:
        slots["llm"].answers["chat"] = fakes.generation('{"a": 1}')  # valid for both formats: one call
    elif fields["tool_choice"] not in ("auto", "none"):
        slots["llm"].answers["chat"] = calling("get_weather", '{"city": "Paris"}')
    r = await http.post(CHAT, json={"messages": MSG, **fields})
    assert r.status_code == 200, r.text
    (call,) = slots["llm"].calls
    sent = call[1][0].model_dump(mode="json", by_alias=True, exclude_none=True)
    assert {name: sent[name] for name in fields} == fields


async def test_completions_take_a_response_format(http, slots):
    r = await http.post(COMPLETIONS, json={"prompt": "hi", "response_format": {"type": "json_object"}})
    assert r.status_code == 200, r.text
    assert slots["llm"].calls[0][1][0].response_format.type == "json_object"


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"response_format": schema_format(GOOD_SCHEMA)}, "response_format"),
        ({"tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
    ],
)
async def test_a_vision_model_refuses_constrained_decoding(http, slots, fields, param):
    slots["vlm"].answers.clear()
    r = await http.post(CHAT, json={"model": "ominix-tiny-qwen2-vl", "messages": MSG, **fields})
    error = assert_openai_error(r, 400, param, "constrained_decoding_unavailable")
    assert "vision" in error["message"]
    assert not slots["vlm"].calls
    plain = await http.post(CHAT, json={"model": "ominix-tiny-qwen2-vl", "messages": MSG})
    assert plain.status_code == 418  # the next, plain request goes on to the slot


# ---- what real clients send is accepted and reaches the slot as a constraint --------------------


@pytest.fixture
def sdk(app):
    from openai import AsyncOpenAI

    transport = httpx.ASGITransport(app=app)
    return AsyncOpenAI(
        base_url="http://ingress.test/v1",
        api_key="unused",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=transport, base_url="http://ingress.test"),
    )


def constraint_of(slots) -> Constraint:
    (call,) = slots["llm"].calls
    return Constraint.from_request(call[1][0])


async def test_the_openai_sdks_parse_is_served_with_its_schema(sdk, slots):
    slots["llm"].answers["chat"] = fakes.generation('{"owner": {"name": "Alice", "age": 34}, "city": "Paris"}')
    r = await sdk.chat.completions.parse(model="ominix-tiny-qwen3", messages=MSG, response_format=Household)
    assert r.choices[0].message.parsed == Household(owner=Person(name="Alice", age=34), city="Paris")
    answer = constraint_of(slots).answer
    assert set(answer["properties"]) == {"owner", "city"} and answer["additionalProperties"] is False


async def test_the_openai_sdks_pydantic_tools_are_served(sdk, slots):
    import openai

    slots["llm"].answers["chat"] = calling("Person", '{"name": "Alice", "age": 34}')
    r = await sdk.chat.completions.create(
        model="ominix-tiny-qwen3",
        messages=MSG,
        tools=[openai.pydantic_function_tool(Person)],
        tool_choice={"type": "function", "function": {"name": "Person"}},
    )
    assert Person.model_validate_json(r.choices[0].message.tool_calls[0].function.arguments) == Person(
        name="Alice", age=34
    )
    constraint = constraint_of(slots)
    assert constraint.tool_mode == "required" and [t.name for t in constraint.tools] == ["Person"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
async def test_langchains_structured_output_requests_are_served(app, slots, method):
    from langchain_openai import ChatOpenAI

    slots["llm"].answers["chat"] = fakes.generation('{"name": "Alice", "age": 34}')
    if method == "function_calling":  # the answer comes back as the forced call
        slots["llm"].answers["chat"] = calling("Person", '{"name": "Alice", "age": 34}')
    llm = ChatOpenAI(
        model="ominix-tiny-qwen3",
        base_url="http://ingress.test/v1",
        api_key="unused",
        max_retries=0,
        http_async_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingress.test"),
    )
    structured = llm.with_structured_output(Person, method=method)
    assert await structured.ainvoke("Alice is 34. Who is it? Answer in JSON.") == Person(name="Alice", age=34)
    constraint = constraint_of(slots)
    if method == "function_calling":
        assert constraint.tool_mode == "required" and [t.name for t in constraint.tools] == ["Person"]
    else:
        assert constraint.answer is not None


def calling(name: str, arguments: str):
    def answer(request, model=None):
        call = ToolCall(id="call_1", function=FunctionCall(name=name, arguments=arguments))
        usage = UsageInfo(prompt_tokens=3, completion_tokens=9, total_tokens=12)
        return [
            GenerationChunk(model=model, tool_calls=[call]),
            GenerationChunk(finish_reason="tool_calls", usage=usage),
        ]

    return answer
