"""Anthropic's Messages API in process, driven by the anthropic SDK over fake slots: the
translation onto chat (what the LLM slot receives), the Message and every stream event parsed
by the SDK's types, tool use (forced, round trip), thinking, stop sequences, count_tokens, and
the bad inputs: a 4xx in Anthropic's error shape on these routes only, the slot never called."""

from __future__ import annotations

import json

import anthropic
import httpx
import httpx2
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from deployments.ingress.app import create_app
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, ToolCall, UsageInfo
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

MODEL = "ominix-tiny-qwen3"
EVENTS = TypeAdapter(RawMessageStreamEvent)
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
HI = [{"role": "user", "content": "Hi"}]


def usage(prompt: int = 7, completion: int = 3, cached: int = 0) -> UsageInfo:
    from deployments.protocol.openai import PromptTokensDetails

    return UsageInfo(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
    )


def answer(*chunks: GenerationChunk):
    def respond(request, *images, model=None):
        first = chunks[0].model_copy(update={"model": model})
        return [first, *chunks[1:]]

    return respond


def tool_use(arguments='{"city": "Paris"}'):
    call = ToolCall(id="call_abc", function=FunctionCall(name="get_weather", arguments=arguments))
    return answer(GenerationChunk(tool_calls=[call]), GenerationChunk(finish_reason="tool_calls", usage=usage()))


@pytest.fixture
def slots():
    slots = default_slots()
    slots["llm"].answers["count_tokens"] = lambda request, model=None: 11
    return slots


def make_app(slots, tmp_path, **args):
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path), **args), environ={})
    return create_app(ingress_state(config, slots))


@pytest.fixture
def app(slots, tmp_path):
    return make_app(slots, tmp_path)


@pytest.fixture
async def http(app):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=30) as client:
        yield client


@pytest.fixture
def client(app) -> anthropic.AsyncAnthropic:
    # The anthropic SDK speaks httpx2, whose ASGITransport drives the app the same way.
    transport = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://t")
    return anthropic.AsyncAnthropic(api_key="unused", base_url="http://t", http_client=transport, max_retries=0)


def chat_request(slots, call: int = -1):
    method, args, _ = slots["llm"].calls[call]
    assert method == "chat"
    return args[0]


def extras(request) -> dict:
    return request.model_extra | request.model_dump()


async def sse_events(http, body) -> list[dict]:
    r = await http.post("/v1/messages", json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    events = []
    for frame in (f for f in r.text.split("\n\n") if f.strip()):
        name, data = frame.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        events.append(event)
    return events


def parsed(events: list[dict]) -> list:
    """Each event as the SDK's own type; a ping (the SDK skips it before parsing) as it is."""
    return [event if event == {"type": "ping"} else EVENTS.validate_python(event) for event in events]


def kinds(events: list) -> list[str]:
    return [e["type"] if isinstance(e, dict) else e.type for e in events]


def assert_anthropic_error(r, status, error_type):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == error_type and body["error"]["message"]
    return body["error"]


# ------------------------------------------------------------------ create, the translation


async def test_a_message_through_the_sdk(client, slots):
    m = await client.messages.create(
        model=MODEL,
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi"}]}],
        stop_sequences=["END"],
        metadata={"user_id": "u1"},
        extra_body={"temperature": 0.5, "top_p": 0.9, "top_k": 20},  # older clients' sampling fields
    )
    assert m.content[0].type == "text" and m.content[0].text == "Hello there"
    assert m.stop_reason == "end_turn" and m.stop_sequence is None and m.model == MODEL and m.role == "assistant"
    assert m.usage.input_tokens == 3 and m.usage.output_tokens == 2
    chat = chat_request(slots)
    assert [(x.role, x.content) for x in chat.messages] == [("system", "Be brief."), ("user", "Say hi")]
    assert (chat.max_tokens, chat.stop, chat.temperature, chat.top_p, chat.top_k, chat.user) == (
        64,
        ["END"],
        0.5,
        0.9,
        20,
        "u1",
    )


async def test_the_raw_message_parses_and_cached_tokens_are_counted_apart(http, slots):
    slots["llm"].answers["chat"] = answer(
        GenerationChunk(content="Hi"), GenerationChunk(finish_reason="length", usage=usage(10, 4, cached=6))
    )
    r = await http.post("/v1/messages", json={"model": MODEL, "max_tokens": 4, "messages": HI})
    message = Message.model_validate(r.json())
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (4, 6, 4)


async def test_a_stop_sequence_is_named(client, slots):
    slots["llm"].answers["chat"] = answer(
        GenerationChunk(content="one two"), GenerationChunk(finish_reason="stop", stop_sequence="END", usage=usage())
    )
    m = await client.messages.create(model=MODEL, max_tokens=16, messages=HI, stop_sequences=["END"])
    assert (m.stop_reason, m.stop_sequence) == ("stop_sequence", "END")
    async with client.messages.stream(model=MODEL, max_tokens=16, messages=HI, stop_sequences=["END"]) as stream:
        final = await stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "END")


async def test_thinking_comes_back_as_thinking_blocks_and_switches_the_template(client, slots):
    slots["llm"].answers["chat"] = answer(
        GenerationChunk(reasoning_content="Hmm."),
        GenerationChunk(content="42"),
        GenerationChunk(finish_reason="stop", usage=usage()),
    )
    m = await client.messages.create(
        model=MODEL, max_tokens=2048, messages=HI, thinking={"type": "enabled", "budget_tokens": 1024}
    )
    assert [b.type for b in m.content] == ["thinking", "text"] and m.content[0].thinking == "Hmm."
    assert extras(chat_request(slots))["chat_template_kwargs"] == {"enable_thinking": True}
    await client.messages.create(model=MODEL, max_tokens=64, messages=HI, thinking={"type": "disabled"})
    assert extras(chat_request(slots))["chat_template_kwargs"] == {"enable_thinking": False}
    async with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as stream:
        kinds = [e.delta.type async for e in stream if e.type == "content_block_delta"]
        final = await stream.get_final_message()
    assert (
        kinds == ["thinking_delta", "text_delta"]
        and final.content[0].thinking == "Hmm."
        and final.content[1].text == "42"
    )


# ------------------------------------------------------------------ tools


async def test_a_forced_tool_use_and_its_result(client, slots):
    slots["llm"].answers["chat"] = tool_use()
    m = await client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    )
    (block,) = m.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
    assert block.id.startswith("toolu_") and m.stop_reason == "tool_use"
    chat = extras(chat_request(slots))
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["parallel_tool_calls"] is False
    assert chat["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
    slots["llm"].answers["chat"] = fakes.generation("Sunny.")
    m2 = await client.messages.create(
        model=MODEL,
        max_tokens=64,
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [block.model_dump()]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": block.id, "content": "sunny"},
                    {"type": "text", "text": "So?"},
                ],
            },
        ],
    )
    assert m2.content[0].text == "Sunny."
    messages = chat_request(slots).messages
    assert [x.role for x in messages] == ["user", "assistant", "tool", "user"]
    assert messages[1].tool_calls[0].id == block.id and json.loads(messages[1].tool_calls[0].function.arguments) == {
        "city": "Paris"
    }
    assert (messages[2].tool_call_id, messages[2].content, messages[3].content) == (block.id, "sunny", "So?")


@pytest.mark.parametrize(
    ("choice", "chat_choice"), [({"type": "any"}, "required"), ({"type": "auto"}, "auto"), ({"type": "none"}, "none")]
)
async def test_tool_choice_maps_onto_chat(client, slots, choice, chat_choice):
    await client.messages.create(model=MODEL, max_tokens=8, messages=HI, tools=[WEATHER], tool_choice=choice)
    assert extras(chat_request(slots))["tool_choice"] == chat_choice


async def test_a_streamed_tool_use_parses_and_accumulates(client, http, slots):
    slots["llm"].answers["chat"] = tool_use()
    body = {"model": MODEL, "max_tokens": 64, "messages": HI, "tools": [WEATHER], "tool_choice": {"type": "any"}}
    events = parsed(await sse_events(http, body))
    assert kinds(events) == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[3].delta.type == "input_json_delta" and events[5].delta.stop_reason == "tool_use"
    assert events[5].usage.input_tokens == 7 and events[5].usage.output_tokens == 3
    async with client.messages.stream(**body) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"city": "Paris"}


async def test_arguments_that_are_no_object_are_text_not_dropped(client, slots):
    slots["llm"].answers["chat"] = tool_use(arguments="not json")
    m = await client.messages.create(model=MODEL, max_tokens=8, messages=HI, tools=[WEATHER])
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == "not json"


# ------------------------------------------------------------------ streaming, count_tokens


async def test_every_stream_event_parses_in_order(http):
    events = parsed(await sse_events(http, {"model": MODEL, "max_tokens": 8, "messages": HI}))
    assert kinds(events) == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0].message.content == [] and events[6].delta.stop_reason == "end_turn"


async def test_a_fault_mid_stream_is_an_error_event(http, slots):
    slots["llm"].answers["chat"] = lambda request, model=None: [
        GenerationChunk(model=model, content="Hel"),
        APIError(503, "A model replica died", "service_unavailable"),
    ]
    events = await sse_events(http, {"model": MODEL, "max_tokens": 8, "messages": HI})
    assert events[-1] == {"type": "error", "error": {"type": "overloaded_error", "message": "A model replica died"}}


async def test_count_tokens_asks_the_llm_slot(client, slots):
    count = await client.messages.count_tokens(model=MODEL, system="S", messages=HI, tools=[WEATHER])
    assert count.input_tokens == 11
    method, (request,), model = slots["llm"].calls[-1]
    assert method == "count_tokens" and model == MODEL
    assert [m.role for m in request.messages] == ["system", "user"] and request.tools[0].function.name == "get_weather"


# ------------------------------------------------------------------ bad input, errors, auth


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        ({"max_tokens": 8, "messages": HI}, 400, "invalid_request_error"),
        ({"model": MODEL, "messages": HI}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 0, "messages": HI}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 8, "messages": []}, 400, "invalid_request_error"),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]},
            400,
            "invalid_request_error",
        ),
        (
            {"model": MODEL, "max_tokens": 8, "messages": [{"role": "assistant", "content": "prefill"}]},
            400,
            "invalid_request_error",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}]}
                ],
            },
            400,
            "invalid_request_error",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
            },
            400,
            "invalid_request_error",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": HI,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            400,
            "invalid_request_error",
        ),
        (
            {
                "model": MODEL,
                "max_tokens": 8,
                "messages": HI,
                "tools": [WEATHER],
                "tool_choice": {"type": "tool", "name": "nope"},
            },
            400,
            "invalid_request_error",
        ),
        ({"model": MODEL, "max_tokens": 8, "messages": HI, "temperature": 1.5}, 400, "invalid_request_error"),
        ({"model": MODEL, "max_tokens": 8, "messages": HI, "container": "c"}, 400, "invalid_request_error"),
        (
            {"model": MODEL, "max_tokens": 2000, "messages": HI, "thinking": {"type": "enabled", "budget_tokens": 10}},
            400,
            "invalid_request_error",
        ),
        ({"model": "no-such-model", "max_tokens": 8, "messages": HI}, 404, "not_found_error"),
    ],
)
async def test_bad_requests_are_anthropic_errors_and_reach_no_slot(http, slots, body, status, error_type):
    for stream in (False, True):
        assert_anthropic_error(await http.post("/v1/messages", json={**body, "stream": stream}), status, error_type)
    assert not slots["llm"].calls


async def test_the_sdk_raises_its_own_errors(client):
    with pytest.raises(anthropic.BadRequestError) as info:
        await client.messages.create(
            model=MODEL,
            max_tokens=8,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}],
        )
    assert "answers no tool_use" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="nope", max_tokens=8, messages=HI)


async def test_errors_keep_their_shape_per_route(http, slots):
    assert_anthropic_error(
        await http.post("/v1/messages", content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "invalid_request_error",
    )
    assert_anthropic_error(await http.post("/v1/messages/nope", json={}), 404, "not_found_error")
    assert_anthropic_error(await http.get("/v1/messages"), 405, "invalid_request_error")
    assert_anthropic_error(
        await http.post("/v1/messages/count_tokens", json={"messages": HI}), 400, "invalid_request_error"
    )
    big = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x" * (21 * 1024 * 1024)}]}
    assert_anthropic_error(await http.post("/v1/messages", json=big), 413, "request_too_large")
    assert not slots["llm"].calls
    assert_openai_error(await http.post("/v1/chat/completions", json={"messages": []}), 400)  # OpenAI's elsewhere


async def test_x_api_key_or_bearer_when_keys_are_configured(slots, tmp_path):
    app = make_app(slots, tmp_path, security={"api_keys": ["k1"]})
    body = {"model": MODEL, "max_tokens": 8, "messages": HI}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        assert (await http.post("/v1/messages", json=body, headers={"x-api-key": "k1"})).status_code == 200
        assert (await http.post("/v1/messages", json=body, headers={"Authorization": "Bearer k1"})).status_code == 200
        assert_anthropic_error(
            await http.post("/v1/messages", json=body, headers={"x-api-key": "k2"}), 401, "authentication_error"
        )
        assert_anthropic_error(await http.post("/v1/messages", json=body), 401, "authentication_error")
        assert_openai_error(await http.get("/v1/models"), 401)
        assert (await http.get("/v1/models", headers={"x-api-key": "k1"})).status_code == 200
    transport = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://t")
    sdk = anthropic.AsyncAnthropic(api_key="k1", base_url="http://t", http_client=transport, max_retries=0)
    assert (await sdk.messages.create(**body)).content[0].text == "Hello there"


async def test_image_blocks_go_to_the_vision_model_and_count_tokens_refuses_it(client, slots, http):
    import base64

    from tests.ingress.test_vision import png

    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png()).decode()},
    }
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "What is it?"}]}]
    m = await client.messages.create(model="ominix-tiny-qwen2-vl", max_tokens=8, messages=messages)
    assert m.content[0].text == "A red square"
    method, args, _ = slots["vlm"].calls[-1]
    assert method == "chat" and len(args[1]) == 1
    r = await http.post("/v1/messages", json={"model": MODEL, "max_tokens": 8, "messages": messages})
    assert "vision model" in assert_anthropic_error(r, 400, "invalid_request_error")["message"]
    r = await http.post("/v1/messages/count_tokens", json={"model": "ominix-tiny-qwen2-vl", "messages": HI})
    assert_anthropic_error(r, 400, "invalid_request_error")
    assert not slots["llm"].calls
