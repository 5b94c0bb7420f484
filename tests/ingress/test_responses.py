"""The Responses API in process, driven by the openai SDK's own `responses` client over fake
slots: the translation onto chat (what the LLM slot receives), the response object and every
stream event parsed by the SDK's types, stored responses (continue, retrieve, delete, input
items) from one ingress replica or another, and the bad inputs: a 4xx in OpenAI's shape, nothing
stored, the slot never called."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from deployments.ingress.app import create_app
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.logprobs import TokenLogprob, TopLogprob
from deployments.protocol.openai import FunctionCall, ToolCall, UsageInfo
from deployments.records import RESPONSES, RecordStore
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

MODEL = "ominix-tiny-qwen3"
EVENTS = TypeAdapter(ResponseStreamEvent)
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": True,
}


def usage(prompt: int = 5, completion: int = 3) -> UsageInfo:
    return UsageInfo(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def tool_call_answer(name="get_weather", arguments='{"city": "Paris"}', call_id="call_abc"):
    def answer(request, *images, model=None):
        call = ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))
        return [
            GenerationChunk(model=model, tool_calls=[call]),
            GenerationChunk(finish_reason="tool_calls", usage=usage()),
        ]

    return answer


def thinking_answer(request, *images, model=None):
    return [
        GenerationChunk(model=model, reasoning_content="Let me think."),
        GenerationChunk(reasoning_content=" Done."),
        GenerationChunk(content="Forty-two."),
        GenerationChunk(finish_reason="stop", usage=usage()),
    ]


def failing_answer(request, *images, model=None):
    return [GenerationChunk(model=model, content="Hel"), APIError(503, "A model replica died", "service_unavailable")]


@pytest.fixture
def client(http) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=http, max_retries=0)


def chat_request(slots, call: int = -1):
    """The chat request the LLM slot received."""
    method, args, _ = slots["llm"].calls[call]
    assert method == "chat"
    return args[0]


def stored(state) -> list[str]:
    return [record.key for record in state.record_store().store.list(RESPONSES)]


async def sse_events(http, body) -> list[dict]:
    r = await http.post("/v1/responses", json={**body, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    frames = [frame for frame in r.text.split("\n\n") if frame.strip()]
    assert frames.pop() == "data: [DONE]"  # the spec's terminal event, after the last one
    events = []
    for frame in frames:
        lines = frame.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), frame
        event = json.loads(lines[1][6:])
        assert lines[0][7:] == event["type"]
        events.append(event)
    return events


# ------------------------------------------------------------------ create, the translation


async def test_a_plain_response_through_the_sdk(client, slots, state):
    r = await client.responses.create(
        model=MODEL,
        input="Say hi",
        instructions="Be brief.",
        max_output_tokens=20,
        temperature=0,
        top_p=0.9,
        metadata={"run": "1"},
    )
    assert r.output_text == "Hello there" and r.status == "completed" and r.model == MODEL
    assert r.id.startswith("resp_") and r.usage.input_tokens == 3 and r.usage.output_tokens == 2
    assert r.metadata == {"run": "1"} and r.instructions == "Be brief." and r.max_output_tokens == 20
    chat = chat_request(slots)
    assert [(m.role, m.content) for m in chat.messages] == [("system", "Be brief."), ("user", "Say hi")]
    assert (chat.max_completion_tokens, chat.temperature, chat.top_p) == (20, 0, 0.9)
    assert stored(state) == [r.id]


async def test_the_raw_response_parses_with_the_sdks_model(http):
    r = await http.post("/v1/responses", json={"model": MODEL, "input": "Hi"})
    assert r.status_code == 200
    response = Response.model_validate(r.json())
    assert response.output[0].type == "message" and response.output[0].content[0].text == "Hello there"


def answer_with_logprobs(request, *images, model=None):
    """Thinking, then two answer tokens, each chunk with its tokens' entries."""

    def entry(token, logprob):
        top = [TopLogprob(token=token, logprob=logprob, bytes=list(token.encode()))]
        return TokenLogprob(token=token, logprob=logprob, bytes=list(token.encode()), top_logprobs=top)

    return [
        GenerationChunk(model=model, reasoning_content="Hm.", logprobs=[entry("Hm.", -2.0)]),
        GenerationChunk(content="Hi", logprobs=[entry("Hi", -0.5)]),
        GenerationChunk(content=" there", logprobs=[entry(" there", -0.25)]),
        GenerationChunk(finish_reason="stop", usage=usage()),
    ]


@pytest.mark.parametrize("ask", [{"include": ["message.output_text.logprobs"]}, {"top_logprobs": 1}])
async def test_the_answers_logprobs_when_asked_for(client, slots, ask):
    """`include: ["message.output_text.logprobs"]` (and/or `top_logprobs`) asks chat for its
    entries; the answer's tokens come back on the output_text, streamed on each delta and on
    its done event; the thinking's are not the answer's."""
    slots["llm"].answers["chat"] = answer_with_logprobs
    r = await client.responses.create(model=MODEL, input="Hi", **ask)
    chat = chat_request(slots)
    assert (chat.logprobs, chat.top_logprobs) == (True, ask.get("top_logprobs", 0))
    text = r.output[-1].content[0]
    assert [(e.token, e.logprob) for e in text.logprobs] == [("Hi", -0.5), (" there", -0.25)]
    assert text.logprobs[0].top_logprobs[0].bytes == list(b"Hi") and r.top_logprobs == ask.get("top_logprobs", 0)
    async with client.responses.stream(model=MODEL, input="Hi", **ask) as stream:
        events = [e async for e in stream]
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert [[lp.token for lp in e.logprobs] for e in deltas] == [["Hi"], [" there"]]
    (done,) = [e for e in events if e.type == "response.output_text.done"]
    assert [lp.token for lp in done.logprobs] == ["Hi", " there"]
    final = events[-1].response.output[-1].content[0]
    assert [lp.logprob for lp in final.logprobs] == [-0.5, -0.25]


async def test_no_logprobs_unless_asked_for(client, slots):
    slots["llm"].answers["chat"] = answer_with_logprobs
    r = await client.responses.create(model=MODEL, input="Hi")
    assert not chat_request(slots).logprobs and r.output[-1].content[0].logprobs == []


async def test_item_inputs_become_chat_messages(client, slots):
    await client.responses.create(
        model=MODEL,
        input=[
            {"role": "developer", "content": "Rules."},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
            },
            {"role": "assistant", "content": "c"},
            {"role": "user", "content": "d"},
        ],
    )
    assert [(m.role, m.content) for m in chat_request(slots).messages] == [
        ("developer", "Rules."),
        ("user", "ab"),
        ("assistant", "c"),
        ("user", "d"),
    ]


async def test_tools_tool_choice_parallel_calls_and_text_format_reach_the_chat_request(client, slots):
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    await client.responses.create(
        model=MODEL,
        input="Weather?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
    )
    chat = chat_request(slots)
    assert chat.tools[0].function.name == "get_weather" and chat.tools[0].function.parameters == WEATHER["parameters"]
    extra = chat.model_extra | chat.model_dump(by_alias=True, exclude_none=True)  # typed on the chat request
    assert extra["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert extra["parallel_tool_calls"] is False
    assert extra["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    await client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], tool_choice="required", text={"format": {"type": "json_object"}}
    )
    extra = chat_request(slots).model_extra | chat_request(slots).model_dump(by_alias=True, exclude_none=True)
    assert extra["tool_choice"] == "required" and extra["response_format"] == {"type": "json_object"}


# ------------------------------------------------------------------ streaming


async def test_every_stream_event_parses_in_order_with_sequence_numbers(http):
    events = await sse_events(http, {"model": MODEL, "input": "Hi"})
    parsed = [EVENTS.validate_python(e) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    assert [e.type for e in parsed] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert parsed[0].response.status == "in_progress" and parsed[-1].response.status == "completed"
    assert parsed[-1].response.output[0].content[0].text == "Hello there" == parsed[6].text


async def test_the_sdks_stream_helper_accumulates_the_response(client, state):
    async with client.responses.stream(model=MODEL, input="Hi") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text == "Hello there"
    assert stored(state) == [final.id]
    assert (await client.responses.retrieve(final.id)).output_text == "Hello there"


async def test_a_streamed_tool_call_and_thinking_parse(http, slots):
    slots["llm"].answers["chat"] = thinking_answer
    events = [EVENTS.validate_python(e) for e in await sse_events(http, {"model": MODEL, "input": "Think"})]
    types = [e.type for e in events]
    assert "response.reasoning_text.delta" in types and "response.reasoning_text.done" in types
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[0].content[0].text == "Let me think. Done." and final.output_text == "Forty-two."
    slots["llm"].answers["chat"] = tool_call_answer()
    events = [
        EVENTS.validate_python(e)
        for e in await sse_events(http, {"model": MODEL, "input": "Weather?", "tools": [WEATHER]})
    ]
    types = [e.type for e in events]
    assert types[2:6] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
    ]
    call = events[-1].response.output[0]
    assert (call.type, call.name, call.call_id, call.arguments) == (
        "function_call",
        "get_weather",
        "call_abc",
        '{"city": "Paris"}',
    )


async def test_a_fault_mid_stream_is_an_error_then_response_failed_and_nothing_is_stored(http, slots, state):
    slots["llm"].answers["chat"] = failing_answer
    events = await sse_events(http, {"model": MODEL, "input": "Hi"})
    parsed = [EVENTS.validate_python(e) for e in events]
    assert [e.type for e in parsed[-2:]] == ["error", "response.failed"]
    assert parsed[-1].response.status == "failed" and parsed[-1].response.error.code == "server_error"
    assert stored(state) == []


# ------------------------------------------------------------------ stored responses


async def test_previous_response_id_continues_the_stored_conversation(client, slots, state):
    first = await client.responses.create(model=MODEL, input="My name is Ada.", instructions="Be kind.")
    second = await client.responses.create(model=MODEL, input="What is my name?", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    # the history comes first, the first request's instructions are not carried over
    assert [(m.role, m.content) for m in chat_request(slots).messages] == [
        ("user", "My name is Ada."),
        ("assistant", "Hello there"),
        ("user", "What is my name?"),
    ]
    # one chain, one routing key (its first turn's): the replica holding the prefix answers all
    third = await client.responses.create(
        model=MODEL, input="Bye.", instructions="Other rules.", previous_response_id=second.id
    )
    sessions = slots["llm"].sessions
    assert sessions[0].startswith("prefix:") and sessions[0] == sessions[1] == sessions[2]
    items = await client.responses.input_items.list(second.id, order="asc")
    assert [(i.type, i.role) for i in items.data] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert all(i.id for i in items.data)
    page = await client.responses.input_items.list(second.id, limit=1)
    assert page.data[0].content[0].text == "What is my name?" and page.has_more  # newest first
    after = await client.responses.input_items.list(second.id, limit=5, after=page.data[0].id)
    assert [i.role for i in after.data] == ["assistant", "user"] and not after.has_more
    assert sorted(stored(state)) == sorted([first.id, second.id, third.id])


@pytest.mark.parametrize("truncation", ["auto", "disabled"])
async def test_a_conversation_past_the_context_leaves_its_oldest_turns_out_unless_told_not_to(
    client, slots, state, truncation
):
    """`truncation: "auto"` (the Agents SDK's ModelSettings.truncation): the conversation is sent
    again without its oldest turn, a tool call and its output with it, until the model's
    context holds it; the stored conversation stays whole. `disabled` (the default): a 400."""

    def small_context(request, *images, model=None):
        if len(request.messages) > 4:  # the system prompt and three more messages fit
            full = APIError(
                400, "The prompt is too long", "invalid_request_error", "messages", "context_length_exceeded"
            )
            return [full]
        return fakes.generation("Sure.")(request, model=model)

    slots["llm"].answers["chat"] = tool_call_answer()
    first = await client.responses.create(model=MODEL, input="Weather?", instructions="Be brief.", tools=[WEATHER])
    slots["llm"].answers["chat"] = small_context
    output = {"type": "function_call_output", "call_id": "call_abc", "output": "sunny"}
    second = await client.responses.create(
        model=MODEL, input=[output], instructions="Be brief.", previous_response_id=first.id
    )  # system, user, assistant call, tool: 4 messages fit
    ask = dict(model=MODEL, input="And tomorrow?", instructions="Be brief.", previous_response_id=second.id)
    if truncation == "disabled":
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(**ask)
        assert (info.value.body["code"], info.value.body["param"]) == ("context_length_exceeded", "input")
        return
    third = await client.responses.create(**ask, truncation="auto")
    assert third.status == "completed" and third.truncation == "auto" and third.output_text == "Sure."
    sent = [(m.role, m.content) for m in chat_request(slots).messages]
    assert sent == [("system", "Be brief."), ("user", "And tomorrow?")]  # the weather turn left out whole
    items = await client.responses.input_items.list(third.id, order="asc")
    assert [i.type for i in items.data] == ["message", "function_call", "function_call_output", "message", "message"]


async def test_retrieve_and_delete(client, state):
    r = await client.responses.create(model=MODEL, input="Hi")
    got = await client.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == "Hello there"
    await client.responses.delete(r.id)
    for call in (
        client.responses.retrieve(r.id),
        client.responses.delete(r.id),
        client.responses.input_items.list(r.id),
    ):
        with pytest.raises(openai.NotFoundError) as info:
            await call
        assert info.value.body["code"] == "response_not_found"
    assert stored(state) == []


async def test_store_false_stores_nothing(client, state):
    r = await client.responses.create(model=MODEL, input="Hi", store=False)
    assert r.output_text == "Hello there" and r.store is False
    assert stored(state) == []
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(r.id)


async def test_a_function_tool_round_trip(client, slots):
    slots["llm"].answers["chat"] = tool_call_answer()
    first = await client.responses.create(
        model=MODEL, input="Weather in Paris?", tools=[WEATHER], tool_choice="required"
    )
    (call,) = first.output
    assert call.type == "function_call" and call.name == "get_weather" and call.call_id == "call_abc"
    assert json.loads(call.arguments) == {"city": "Paris"}
    slots["llm"].answers["chat"] = fakes.generation("It is sunny in Paris.")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}
    second = await client.responses.create(model=MODEL, previous_response_id=first.id, input=[output], tools=[WEATHER])
    assert second.output_text == "It is sunny in Paris."
    messages = chat_request(slots).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].tool_calls[0].id == "call_abc" and messages[1].tool_calls[0].function.name == "get_weather"
    assert messages[2].tool_call_id == "call_abc" and messages[2].content == '{"sky": "sunny"}'


async def test_the_whole_conversation_as_items_with_reasoning(client, slots):
    await client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "Weather?"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "Use the tool."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "rain"}]},
        ],
        tools=[WEATHER],
    )
    messages = chat_request(slots).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].reasoning_content == "Use the tool." and messages[2].content == "rain"


async def test_every_ingress_replica_sees_the_stored_responses_through_control(tmp_path):
    """Two ingress replicas over one Control: what one stores, the other continues and deletes."""
    control = fakes.RecordsControl(RecordStore(tmp_path / "control.sqlite3"))
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={})
    replicas = [create_app(ingress_state(config, default_slots(), control=control)) for _ in range(2)]
    clients = [
        openai.AsyncOpenAI(
            api_key="x",
            base_url="http://t/v1",
            http_client=httpx.AsyncClient(transport=httpx.ASGITransport(app=app)),
            max_retries=0,
        )
        for app in replicas
    ]
    first = await clients[0].responses.create(model=MODEL, input="Hi")
    assert (await clients[1].responses.retrieve(first.id)).output_text == "Hello there"
    second = await clients[1].responses.create(model=MODEL, input="Again", previous_response_id=first.id)
    assert len((await clients[0].responses.input_items.list(second.id)).data) == 3
    await clients[0].responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        await clients[1].responses.retrieve(second.id)


# ------------------------------------------------------------------ images


async def test_input_images_go_to_the_vision_model_and_are_a_400_for_a_text_model(http, slots):
    import base64

    from tests.ingress.test_vision import png

    image = "data:image/png;base64," + base64.b64encode(png()).decode()
    content = [{"type": "input_text", "text": "What is it?"}, {"type": "input_image", "image_url": image}]
    body = {"model": "ominix-tiny-qwen2-vl", "input": [{"role": "user", "content": content}]}
    r = await http.post("/v1/responses", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] == "A red square"
    method, args, _ = slots["vlm"].calls[-1]
    assert method == "chat" and len(args[1]) == 1  # the decoded image went with the request
    r = await http.post("/v1/responses", json={**body, "model": MODEL})
    assert_openai_error(r, 400, param="input", code="image_input_unsupported")


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL}, 400, "input"),
        ({"model": MODEL, "input": ""}, 400, "input"),
        ({"model": MODEL, "input": [{"role": "tool", "content": "x"}]}, 400, "input"),
        ({"model": MODEL, "input": [{"role": "user", "content": 3}]}, 400, "input"),
        ({"model": MODEL, "input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]}, 400, "input"),
        ({"model": MODEL, "input": [{"type": "computer_call_output", "call_id": "c"}]}, 400, "input"),
        (
            {"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            400,
            "input",
        ),
        ({"model": MODEL, "input": "Hi", "tools": [{"type": "web_search"}]}, 400, "tools[0].type"),
        (
            {"model": MODEL, "input": "Hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "other"}},
            400,
            "tool_choice",
        ),
        ({"model": MODEL, "input": "Hi", "tool_choice": {"type": "file_search"}}, 400, "tool_choice"),
        ({"model": MODEL, "input": "Hi", "conversation": "conv_1"}, 404, "conversation"),
        ({"model": MODEL, "input": "Hi", "conversation": {"id": ""}}, 400, "conversation"),
        ({"model": MODEL, "input": "Hi", "conversation": "c", "previous_response_id": "r"}, 400, "conversation"),
        ({"model": MODEL, "input": "Hi", "text": {"verbosity": "low"}}, 400, "text.verbosity"),
        ({"model": MODEL, "input": "Hi", "truncation": "middle"}, 400, "truncation"),
        ({"model": MODEL, "input": "Hi", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"model": MODEL, "input": "Hi", "temperature": 3}, 400, "temperature"),
        ({"model": MODEL, "input": "Hi", "metadata": {"k": "v" * 513}}, 400, "metadata"),
        ({"model": MODEL, "input": "Hi", "text": {"format": {"type": "json_schema"}}}, 400, "text.format"),
        ({"model": "no-such-model", "input": "Hi"}, 404, "model"),
        ({"model": MODEL, "input": "Hi", "previous_response_id": "resp_unknown"}, 404, "previous_response_id"),
    ],
)
async def test_bad_requests_are_openai_errors_store_nothing_and_reach_no_slot(http, slots, state, body, status, param):
    for stream in (False, True):
        r = await http.post("/v1/responses", json={**body, "stream": stream})
        assert_openai_error(r, status, param=param)
    assert not slots["llm"].calls and stored(state) == []


async def test_an_input_over_the_routes_cap_is_a_413(http, slots, state):
    r = await http.post("/v1/responses", json={"model": MODEL, "input": "x" * (21 * 1024 * 1024)})
    assert_openai_error(r, 413, code="request_too_large")
    assert not slots["llm"].calls and stored(state) == []


async def test_a_chat_side_refusal_names_the_responses_field(http, slots):
    slots["llm"].answers["chat"] = lambda request, model=None: [
        APIError(400, "reasoning_effort: this model's chat template has no reasoning effort", param="reasoning_effort")
    ]
    r = await http.post("/v1/responses", json={"model": MODEL, "input": "Hi", "reasoning": {"effort": "low"}})
    error = assert_openai_error(r, 400, param="reasoning.effort")
    assert error["message"].startswith("reasoning.effort:")


async def test_a_stored_response_missing_or_its_input_items_unknown_are_404s_and_400s(http, client):
    assert_openai_error(await http.get("/v1/responses/resp_nope"), 404, code="response_not_found")
    assert_openai_error(await http.delete("/v1/responses/resp_nope"), 404, code="response_not_found")
    r = await client.responses.create(model=MODEL, input="Hi")
    assert_openai_error(
        await http.get(f"/v1/responses/{r.id}/input_items", params={"after": "nope"}), 400, param="after"
    )
    assert_openai_error(await http.get(f"/v1/responses/{r.id}/input_items", params={"limit": 0}), 400)
    assert_openai_error(await http.get(f"/v1/responses/{r.id}", params={"stream": "true"}), 400, param="stream")


# ------------------------------------------------------------------ the OpenAI Agents SDK


async def test_an_agents_sdk_runner_calls_the_tool_and_answers(client, slots):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"It is sunny in {city}."

    turns = iter([tool_call_answer(arguments='{"city": "Paris"}'), fakes.generation("Sunny in Paris.")])
    slots["llm"].answers["chat"] = lambda request, *images, model=None: next(turns)(request, model=model)
    agent = Agent(
        name="weather",
        instructions="Use the tool.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=ModelSettings(tool_choice="required", temperature=0),
    )
    result = await Runner.run(agent, "Weather in Paris?", max_turns=3)
    assert called == ["Paris"] and result.final_output == "Sunny in Paris."
    first, second = (chat_request(slots, i) for i in (0, 1))
    assert (first.model_extra | first.model_dump())["tool_choice"] == "required"
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[3].content == "It is sunny in Paris."


# ------------------------------------------------------------------ the CUDA route


async def test_a_cuda_mapped_model_is_answered_by_the_cuda_route(tmp_path):
    """The same dispatch as chat: a mapped id goes to the CUDA proxy (text only), never a local slot."""
    from deployments.protocol.openai import ChatChunkChoice, ChatCompletionChunk, DeltaMessage

    def chunks(request, model=None):
        def chunk(delta, finish=None, usage=None):
            choice = ChatChunkChoice(delta=delta, finish_reason=finish)
            return ChatCompletionChunk(id="c", model=request.model, choices=[choice], usage=usage)

        assert request.messages[-1].content == "Hi" and request.stream
        return [
            chunk(DeltaMessage(role="assistant")),
            chunk(DeltaMessage(content="From CUDA")),
            chunk(DeltaMessage(), "stop", usage()),
        ]

    slots = default_slots()
    state = ingress_state(GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={}), slots)
    state.cuda, state.cuda_models = fakes.FakeClient(stream=chunks), frozenset({"remote-llm"})
    transport = httpx.ASGITransport(app=create_app(state))
    async with httpx.AsyncClient(transport=transport, base_url="http://t/v1") as http:
        client = openai.AsyncOpenAI(api_key="x", base_url="http://t/v1", http_client=http, max_retries=0)
        r = await client.responses.create(model="remote-llm", input="Hi")
        assert r.output_text == "From CUDA" and r.model == "remote-llm" and r.usage.output_tokens == 3
        async with client.responses.stream(model="remote-llm", input="Hi") as stream:
            assert (await stream.get_final_response()).output_text == "From CUDA"
    assert not slots["llm"].calls
