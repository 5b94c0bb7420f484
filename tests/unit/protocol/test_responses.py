"""The Responses API's translation (pure): items to chat messages, tools and formats to chat's
fields, a generation to output items and to stream events that the openai SDK's own types
parse."""

from __future__ import annotations

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from deployments.protocol.errors import APIError, renamed
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, ToolCall, UsageInfo
from deployments.protocol.responses import (
    CHAT_TO_RESPONSES_PARAMS,
    ResponseEvents,
    ResponsesRequest,
    chat_body,
    chat_messages,
    chat_tool_choice,
    chat_tools,
    from_turn,
    normalise_items,
    output_items,
    response_object,
    user_turns,
)

EVENTS = TypeAdapter(ResponseStreamEvent)
CALL = ToolCall(id="call_1", function=FunctionCall(name="f", arguments='{"a": 1}'))
USAGE = UsageInfo(prompt_tokens=4, completion_tokens=2, total_tokens=6)


def messages(items, instructions=None):
    return chat_messages(normalise_items(items), instructions)


def test_a_string_input_is_one_user_message_after_the_instructions():
    request = ResponsesRequest(input="Hi", instructions="Be brief.")
    assert messages(request.input_items(), request.instructions) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]


def test_an_assistant_answer_and_its_calls_are_one_turn_with_its_reasoning():
    items = [
        {"role": "user", "content": "Weather?"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Use f."}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "rain"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "sun"}]},
        {"role": "user", "content": "And?"},
    ]
    out = messages(items)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user"]
    assert out[1]["content"] == "Checking." and out[1]["reasoning_content"] == "Use f."
    assert [c["id"] for c in out[1]["tool_calls"]] == ["c1", "c2"]
    assert out[3] == {"role": "tool", "tool_call_id": "c2", "content": "sun"}


def test_images_make_parts_and_text_alone_stays_a_string():
    items = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What?"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA"},
            ],
        }
    ]
    (message,) = messages(items)
    assert message["content"] == [
        {"type": "text", "text": "What?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
    ]


def test_normalised_items_have_ids_and_full_shapes():
    (message, call, output) = normalise_items(
        [
            {"role": "user", "content": "Hi"},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "x"},
        ]
    )
    assert message["id"].startswith("msg_") and message["content"] == [{"type": "input_text", "text": "Hi"}]
    assert call["id"].startswith("fc_") and call["status"] == "completed"
    assert output["id"].startswith("fco_") and output["output"] == "x"


@pytest.mark.parametrize(
    ("items", "words"),
    [
        ([{"type": "function_call_output", "call_id": "nope", "output": "x"}], "answers no function_call"),
        ([{"role": "tool", "content": "x"}], "not a message role"),
        ([{"role": "user", "content": []}], "a string or a list"),
        ([{"role": "user", "content": [{"type": "input_audio"}]}], "'input_audio' content"),
        ([{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}], "file ids are not served"),
        ([{"type": "web_search_call"}], "'web_search_call' items"),
        ([{"type": "item_reference", "id": "x"}], "item references"),
        ([{"role": "system", "content": "only rules"}], "no message to answer"),
    ],
)
def test_items_nothing_serves_are_400s_naming_the_input(items, words):
    with pytest.raises(APIError) as info:
        messages(items)
    assert info.value.status_code == 400 and info.value.param == "input" and words in info.value.message


def test_tools_choice_and_format_in_chats_shape():
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}
    assert chat_tools([tool]) == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}
    ]
    with pytest.raises(APIError) as info:
        chat_tools([tool, {"type": "code_interpreter"}])
    assert info.value.param == "tools[1].type" and "'code_interpreter'" in info.value.message
    assert chat_tool_choice({"type": "function", "name": "f"}, [tool]) == {
        "type": "function",
        "function": {"name": "f"},
    }
    assert chat_tool_choice("required", [tool]) == "required"
    request = ResponsesRequest(
        input="x",
        tools=[tool],
        parallel_tool_calls=False,
        text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        max_output_tokens=9,
    )
    body = chat_body(request, normalise_items(request.input_items()))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "n", "schema": {"type": "object"}},
    }
    assert body["parallel_tool_calls"] is False and body["max_completion_tokens"] == 9
    assert body["stream"] and body["stream_options"] == {"include_usage": True}


def test_a_chat_refusal_is_renamed_to_the_responses_field():
    error = renamed(
        APIError(400, "max_completion_tokens: too many", param="max_completion_tokens"), CHAT_TO_RESPONSES_PARAMS
    )
    assert (error.param, error.message) == ("max_output_tokens", "max_output_tokens: too many")
    other = APIError(400, "model: no", param="model")
    assert renamed(other, CHAT_TO_RESPONSES_PARAMS) is other


def test_output_items_in_the_order_said_and_a_cut_answer_is_incomplete():
    total = GenerationChunk(reasoning_content="think", content="Hi", tool_calls=[CALL], finish_reason="tool_calls")
    assert [item["type"] for item in output_items(total)] == ["reasoning", "message", "function_call"]
    assert output_items(GenerationChunk(tool_calls=[CALL]))[0]["call_id"] == "call_1"
    (message,) = output_items(GenerationChunk(content="Hel", finish_reason="length"))
    assert message["status"] == "incomplete"
    response = response_object("resp_1", 0, "m", ResponsesRequest(input="x"), "incomplete", [message], USAGE)
    assert Response.model_validate(response).usage.total_tokens == 6


def events_for(chunks):
    stream = ResponseEvents(response_object("resp_1", 0, "m", ResponsesRequest(input="x")))
    events = stream.start()
    for chunk in chunks:
        events += stream.feed(chunk)
    last = chunks[-1]
    return events + stream.finish(last.finish_reason, last.usage), stream


def test_stream_events_parse_with_the_sdks_types_item_by_item():
    chunks = [
        GenerationChunk(reasoning_content="a"),
        GenerationChunk(reasoning_content="b"),
        GenerationChunk(content="Hi"),
        GenerationChunk(tool_calls=[CALL]),
        GenerationChunk(finish_reason="tool_calls", usage=USAGE),
    ]
    events, stream = events_for(chunks)
    parsed = [EVENTS.validate_python(e) for e in events]
    assert [e.sequence_number for e in parsed] == list(range(len(parsed)))
    indexes = [getattr(e, "output_index", None) for e in parsed]
    assert [i for i in indexes if i is not None] == sorted(i for i in indexes if i is not None)  # item by item
    assert [item["type"] for item in stream.output] == ["reasoning", "message", "function_call"]
    final = parsed[-1].response
    assert final.status == "completed" and final.output[0].content[0].text == "ab" and final.output_text == "Hi"


def test_an_empty_answer_is_one_empty_message_and_a_cut_one_incomplete():
    events, _ = events_for([GenerationChunk(finish_reason="stop", usage=USAGE)])
    final = EVENTS.validate_python(events[-1]).response
    assert final.output[0].type == "message" and final.output_text == ""
    events, _ = events_for([GenerationChunk(content="Hel"), GenerationChunk(finish_reason="length", usage=USAGE)])
    last = EVENTS.validate_python(events[-1])
    assert last.type == "response.incomplete" and last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output[0].status == "incomplete"


def test_a_failure_is_an_error_event_then_response_failed():
    stream = ResponseEvents(response_object("resp_1", 0, "m", ResponsesRequest(input="x")))
    stream.start()
    stream.feed(GenerationChunk(content="Hel"))
    error, failed = (EVENTS.validate_python(e) for e in stream.fail(APIError(503, "gone", "service_unavailable")))
    assert error.type == "error" and error.message == "gone"
    assert failed.response.status == "failed" and failed.response.error.code == "server_error"


def test_from_turn_leaves_whole_turns_out_and_keeps_the_system_messages():
    def message(role, text):
        return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}

    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    items = [
        message("developer", "Be brief."),
        message("user", "One"),
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
        message("assistant", "A"),
        message("user", "Two"),
        message("assistant", "B"),
        message("user", "Three"),
    ]
    assert user_turns(items) == 3
    assert from_turn(items, 0) == items and from_turn(items, 3) == items  # nothing left out
    assert from_turn(items, 1) == [items[0], *items[5:]]
    assert from_turn(items, 2) == [items[0], items[7]]
    orphan = [message("user", "One"), call, message("user", "Two"), items[3]]
    assert from_turn(orphan, 1) == [orphan[2]]  # an output whose call was left out goes with it


def test_the_response_object_has_every_field_open_responses_requires():
    """The spec's ResponseResource: the sampling actually used (reported by the slot), every
    required field present; the old sparse object (null sampling values) is caught."""
    from deployments.protocol.generation import SamplingUsed
    from tests.open_responses import response_problems

    request = ResponsesRequest(input="Hi", tools=[{"type": "function", "name": "f"}], safety_identifier="u1")
    used = SamplingUsed(temperature=0.2, top_p=0.9)
    response = response_object("resp_1", 1, "m", request, "completed", [], USAGE, sampling=used)
    assert response_problems(response) == []
    assert (response["temperature"], response["top_p"], response["safety_identifier"]) == (0.2, 0.9, "u1")
    assert response["tools"] == [
        {"type": "function", "name": "f", "description": None, "parameters": None, "strict": True}
    ]
    sparse = {**response, "temperature": None}
    del sparse["service_tier"]
    assert {p.split(":")[0] for p in response_problems(sparse)} == {"response.temperature", "response.service_tier"}
