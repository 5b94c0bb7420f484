"""Request validation and response serialization of the OpenAI models; SSE framing."""

import json

import pytest
from pydantic import ValidationError

from deployments.protocol.errors import APIError, model_not_found
from deployments.protocol.openai import (
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    CompletionRequest,
    DeltaMessage,
)
from deployments.protocol.sse import HOLE, SSE_DONE, SSEFrame, sse_data

MSG = [{"role": "user", "content": "hi"}]


def test_unknown_fields_are_tolerated():
    req = ChatCompletionRequest(model="m", messages=MSG, some_vendor_field={"a": 1})
    assert req.model == "m"


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"n": 0}, "n"),
        ({"temperature": 3}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop": ["a"] * 17}, "stop"),
        ({"logit_bias": {"abc": 1.0}}, "logit_bias"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": [{"type": "video", "video": "x"}]}]}, "content"),
    ],
)
def test_bad_values_fail_validation(extra, field):
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest(**{"messages": MSG, **extra})
    assert field in str(info.value)


def test_image_parts_parse_and_are_routed_later():
    """Which slot takes image parts is the ingress's choice by model id (serving/generation.py)."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}
    req = ChatCompletionRequest(messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]}])
    assert req.has_images() and req.messages[0].text() == "what?"
    assert not ChatCompletionRequest(messages=MSG).has_images()


def test_text_parts_are_flattened_for_the_template():
    req = ChatCompletionRequest(
        messages=[{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    )
    assert req.messages[0].for_template() == {"role": "system", "content": "ab"}


def test_token_budget_prefers_max_completion_tokens():
    assert ChatCompletionRequest(messages=MSG, max_tokens=5, max_completion_tokens=7).token_budget() == 7


def test_tool_choice_none_hides_tools():
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert ChatCompletionRequest(messages=MSG, tools=tools).template_tools()[0]["function"]["name"] == "f"
    assert ChatCompletionRequest(messages=MSG, tools=tools, tool_choice="none").template_tools() is None


def test_completion_prompt_shapes():
    assert CompletionRequest(prompt=[1, 2, 3]).prompt == [1, 2, 3]
    with pytest.raises(ValidationError):
        CompletionRequest(prompt=["a", "b"])
    with pytest.raises(ValidationError):
        CompletionRequest(prompt="x", suffix="y")


def test_chunk_serialization_keeps_null_finish_reason_and_drops_empty_delta_fields():
    chunk = ChatCompletionChunk(id="c", model="m", choices=[ChatChunkChoice(delta=DeltaMessage(content="x"))])
    event = sse_data(chunk)
    assert event.startswith(b"data: ") and event.endswith(b"\n\n")
    body = json.loads(event[len(b"data: ") :])
    assert body["choices"][0]["finish_reason"] is None
    assert body["choices"][0]["delta"] == {"content": "x"}
    assert SSE_DONE == b"data: [DONE]\n\n"


def test_sse_frame_varies_one_string_and_matches_sse_data():
    def chunk(text):
        return ChatCompletionChunk(
            id="c", created=7, model="m", choices=[ChatChunkChoice(delta=DeltaMessage(content=text))]
        )

    frame = SSEFrame(chunk(HOLE))
    for text in ["x", "", 'quote " back \\ slash', "new\nline\r\t", "é 日本 \u2028 \x01", "</s>"]:
        assert frame(text) == sse_data(chunk(text))
    with pytest.raises(ValueError):
        SSEFrame(chunk("no hole"))
    with pytest.raises(ValueError):
        SSEFrame({"a": HOLE, "b": HOLE})


def test_sse_multiline_strings_become_several_data_lines():
    assert sse_data("a\nb") == b"data: a\ndata: b\n\n"


def test_api_error_body_and_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(model_not_found("x", ["a"])))
    assert isinstance(err, APIError) and err.status_code == 404
    assert err.body()["error"]["code"] == "model_not_found"
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}
