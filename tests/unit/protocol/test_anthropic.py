"""Anthropic's Messages API translation (pure): blocks to chat messages, tool choice, thinking
and output format to chat's fields, a generation to content blocks and to stream events that the
anthropic SDK's own types parse, and Anthropic's error shape."""

from __future__ import annotations

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from deployments.protocol.anthropic import (
    MessageEvents,
    MessagesRequest,
    anthropic_error_body,
    chat_body,
    chat_tool_choice,
    content_blocks,
    message_object,
    stop_reason,
    usage_object,
)
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, PromptTokensDetails, ToolCall, UsageInfo

EVENTS = TypeAdapter(RawMessageStreamEvent)
CALL = ToolCall(id="call_1", function=FunctionCall(name="f", arguments='{"a": 1}'))
USAGE = UsageInfo(
    prompt_tokens=10, completion_tokens=2, total_tokens=12, prompt_tokens_details=PromptTokensDetails(cached_tokens=6)
)
TOOL = {"name": "f", "input_schema": {"type": "object"}}


def request(**fields) -> MessagesRequest:
    return MessagesRequest(
        **{"model": "m", "max_tokens": 2048, "messages": [{"role": "user", "content": "Hi"}], **fields}
    )


def test_system_blocks_tool_results_first_and_images_as_parts():
    body = chat_body(
        request(
            system=[{"type": "text", "text": "A."}, {"type": "text", "text": "B."}],
            messages=[
                {"role": "user", "content": "Weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AA"}},
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "rain"}],
                            "is_error": True,
                        },
                    ],
                },
            ],
            stop_sequences=["END"],
            top_k=5,
            metadata={"user_id": "u"},
        )
    )
    m = body["messages"]
    assert m[0] == {"role": "system", "content": "A.\n\nB."}
    assert m[2]["reasoning_content"] == "t" and m[2]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": '{"a": 1}',
    }
    assert m[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: rain"}
    assert m[4]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AA"}}]
    assert (body["stop"], body["top_k"], body["user"], body["max_tokens"]) == (["END"], 5, "u", 2048)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, ("auto", None)),
        ({"type": "any", "disable_parallel_tool_use": True}, ("required", False)),
        ({"type": "tool", "name": "f"}, ({"type": "function", "function": {"name": "f"}}, None)),
        ({"type": "none"}, ("none", None)),
    ],
)
def test_tool_choice_in_chats_terms(choice, expected):
    assert chat_tool_choice(choice, [TOOL]) == expected


def test_thinking_and_output_config():
    on = chat_body(
        request(
            thinking={"type": "enabled", "budget_tokens": 1024},
            output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
        )
    )
    assert on["chat_template_kwargs"] == {"enable_thinking": True}
    assert on["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": {"type": "object"}},
    }
    assert chat_body(request(thinking={"type": "disabled"}))["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in chat_body(request(thinking={"type": "adaptive"}))
    with pytest.raises(ValueError, match="less than max_tokens"):
        request(max_tokens=1024, thinking={"type": "enabled", "budget_tokens": 1024})


@pytest.mark.parametrize(
    ("messages", "tools", "words"),
    [
        (
            [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "y"}]}],
            None,
            "answers no tool_use",
        ),
        ([{"role": "system", "content": "x"}], None, "not a message role"),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], None, "prefill"),
        ([{"role": "user", "content": [{"type": "document"}]}], None, "'document' blocks"),
        ([{"role": "user", "content": "a"}], [{"type": "bash_20250124", "name": "bash"}], "'bash_20250124' tools"),
    ],
)
def test_what_nothing_serves_is_a_400(messages, tools, words):
    with pytest.raises(APIError) as info:
        chat_body(request(messages=messages, tools=tools))
    assert info.value.status_code == 400 and words in info.value.message


def test_content_blocks_stop_reasons_and_usage():
    blocks = content_blocks(GenerationChunk(reasoning_content="t", tool_calls=[CALL], finish_reason="tool_calls"))
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"] and blocks[1]["input"] == {"a": 1}
    assert blocks[1]["id"] == "toolu_1"
    bad = ToolCall(id="call_2", function=FunctionCall(name="f", arguments="[1]"))
    assert content_blocks(GenerationChunk(tool_calls=[bad])) == [{"type": "text", "text": "[1]"}]
    assert [stop_reason(f, s) for f, s in [("stop", None), ("stop", "X"), ("length", None), ("tool_calls", None)]] == [
        "end_turn",
        "stop_sequence",
        "max_tokens",
        "tool_use",
    ]
    assert usage_object(USAGE) == {
        "input_tokens": 4,
        "output_tokens": 2,
        "cache_read_input_tokens": 6,
        "cache_creation_input_tokens": 0,
    }
    message = message_object("msg_1", "m", blocks, "tool_calls", None, USAGE)
    assert Message.model_validate(message).stop_reason == "tool_use"


def test_stream_events_parse_with_the_sdks_types():
    stream = MessageEvents("msg_1", "m")
    events = stream.start()
    for chunk in (
        GenerationChunk(reasoning_content="t"),
        GenerationChunk(content="Hi"),
        GenerationChunk(tool_calls=[CALL]),
    ):
        events += stream.feed(chunk)
    events += stream.finish("tool_calls", None, USAGE)
    assert events[1] == {"type": "ping"}
    parsed = [EVENTS.validate_python(e) for e in events if e["type"] != "ping"]
    starts = [e.index for e in parsed if e.type == "content_block_start"]
    assert starts == [0, 1, 2] and [e.content_block.type for e in parsed if e.type == "content_block_start"] == [
        "thinking",
        "text",
        "tool_use",
    ]
    assert parsed[-2].delta.stop_reason == "tool_use" and parsed[-2].usage.input_tokens == 4


def test_an_empty_answer_streams_one_empty_text_block():
    stream = MessageEvents("msg_1", "m")
    events = stream.start() + stream.finish("stop", None, USAGE)
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_anthropics_error_shape(status, kind):
    assert anthropic_error_body(APIError(status, "why")) == {"type": "error", "error": {"type": kind, "message": "why"}}
