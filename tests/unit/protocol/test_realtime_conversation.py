"""The Realtime conversation session's configuration (tools included), the chat request it
makes, its items and output audio, alone."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.protocol.openai import FunctionCall, ToolCall
from deployments.protocol.realtime import AudioFormat, RealtimeError
from deployments.protocol.realtime_conversation import (
    OUTPUT_RATE,
    ConversationSession,
    function_call_item,
    function_output,
    input_message,
    output_audio,
    usage_object,
)
from deployments.protocol.realtime_items import ConversationItems


def test_defaults_speak_with_server_vad_that_answers_and_interrupts():
    session = ConversationSession()
    assert session.speaks and session.input_format == AudioFormat("audio/pcm", 24000)
    assert session.turn_detection.create_response and session.turn_detection.interrupt_response
    shown = session.as_event_session("sess_1")
    assert shown["type"] == "realtime" and shown["max_output_tokens"] == "inf"
    assert shown["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert shown["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": OUTPUT_RATE}


def test_an_update_sets_the_input_side_and_the_output_side():
    session = ConversationSession().updated(
        {
            "type": "realtime",
            "instructions": "Be kind.",
            "output_modalities": ["text"],
            "max_output_tokens": 64,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 16000},
                    "turn_detection": {"type": "server_vad", "interrupt_response": False},
                },
                "output": {"voice": {"id": "alba"}, "speed": 1.5},
            },
        }
    )
    assert session.input_format.rate == 16000 and session.instructions == "Be kind." and not session.speaks
    assert session.turn_detection.create_response and not session.turn_detection.interrupt_response
    assert session.voice == "alba" and session.speed == 1.5 and session.max_output_tokens == 64
    assert session.updated({"max_output_tokens": "inf"}).max_output_tokens is None
    assert session.updated({"audio": {"input": {"turn_detection": None}}}).turn_detection is None


def test_a_response_overrides_the_session_for_itself_only():
    session = ConversationSession(instructions="A", voice="alba")
    one = session.for_response(
        {"instructions": "B", "output_modalities": ["text"], "audio": {"output": {"voice": "x"}}}
    )
    assert (one.instructions, one.speaks, one.voice) == ("B", False, "x")
    assert session.for_response(None) is session and session.instructions == "A"


@pytest.mark.parametrize(
    "update, param",
    [
        ({"type": "transcription"}, "session.type"),
        ({"output_modalities": ["audio", "text"]}, "session.output_modalities"),
        ({"max_output_tokens": 1.5}, "session.max_output_tokens"),
        ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "session.audio.output.format.rate"),
        ({"audio": {"output": {"format": {"type": "audio/opus"}}}}, "session.audio.output.format.type"),
        ({"audio": {"input": {"format": {"type": "audio/pcmu", "rate": 16000}}}}, "session.audio.input.format.rate"),
        ({"audio": {"output": {"speed": 9}}}, "session.audio.output.speed"),
        ({"audio": {"output": {"voice": 3}}}, "session.audio.output.voice"),
        (
            {"audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": "yes"}}}},
            "session.audio.input.turn_detection.create_response",
        ),
    ],
)
def test_bad_updates_name_their_field(update, param):
    with pytest.raises(RealtimeError) as error:
        ConversationSession().updated(update)
    assert error.value.param == param


def test_a_user_or_system_message_text():
    parts = [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": " there "}]
    assert input_message({"type": "message", "role": "user", "content": parts}) == ("user", "Hello there")
    assert input_message({"role": "system", "content": parts}) == ("system", "Hello there")
    for bad in (None, {"role": "assistant", "content": parts}, {"role": "user", "content": []}):
        with pytest.raises(RealtimeError):
            input_message(bad)


def test_output_audio_is_resampled_to_24_khz():
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000) * 32767).astype("<i2").tobytes()
    out = np.frombuffer(output_audio(tone, 16000, AudioFormat()), "<i2")
    assert len(out) == 24000
    spectrum = np.abs(np.fft.rfft(out.astype(np.float32)))
    assert abs(np.argmax(spectrum) * OUTPUT_RATE / len(out) - 440) < 2  # the same tone, at the new rate
    assert output_audio(tone, OUTPUT_RATE, AudioFormat()) == tone


TOOL = {"type": "function", "name": "get_time", "description": "Now", "parameters": {"type": "object"}}


def test_the_chat_request_holds_the_instructions_the_history_and_the_tools():
    session = ConversationSession(instructions="Be brief.", max_output_tokens=30).updated(
        {"tools": [TOOL], "tool_choice": "required", "model": "m"}
    )
    history = ConversationItems()
    history.add({"id": "i1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Time?"}]})
    body = session.chat_body(history)
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Time?"}]
    assert body["tools"] == [
        {"type": "function", "function": {"name": "get_time", "description": "Now", "parameters": {"type": "object"}}}
    ]
    assert (body["tool_choice"], body["max_tokens"], body["model"], body["stream"]) == ("required", 30, "m", True)
    assert body["min_tokens"] == 1  # a response says something: no end-of-sequence as its first token
    named = session.for_response({"tool_choice": {"type": "function", "name": "get_time"}})
    assert named.chat_body(history)["tool_choice"] == {"type": "function", "function": {"name": "get_time"}}
    assert "tools" not in ConversationSession().chat_body(history)  # no tools: a plain chat
    assert session.updated({"tools": [], "tool_choice": "auto"}).chat_body(history).keys().isdisjoint({"tools"})


def test_a_function_output_item_and_a_call_item():
    assert function_output({"type": "function_call_output", "call_id": "c1", "output": ""}) == ("c1", "")
    call = ToolCall(id="c1", function=FunctionCall(name="get_time", arguments="{}"))
    announced = function_call_item("item_1", call, "in_progress", "")
    assert (announced["arguments"], function_call_item("item_1", call, "completed")["arguments"]) == ("", "{}")


def test_usage_counts_the_llm_tokens_and_no_audio_tokens():
    from deployments.protocol.openai import PromptTokensDetails, UsageInfo

    usage = UsageInfo(
        prompt_tokens=40,
        completion_tokens=9,
        total_tokens=49,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=32),
    )
    shown = usage_object(usage)
    assert (shown["input_tokens"], shown["output_tokens"], shown["total_tokens"]) == (40, 9, 49)
    assert shown["input_token_details"]["cached_tokens"] == 32 and shown["output_token_details"]["audio_tokens"] == 0
    assert usage_object(None) is None


@pytest.mark.parametrize(
    "update, param, code",
    [
        ({"temperature": 0.8}, "session.temperature", "unknown_parameter"),  # a beta field, gone in GA
        (
            {"audio": {"input": {"noise_reduction": {"type": "near_field"}}}},
            "session.audio.input.noise_reduction",
            None,
        ),
        ({"audio": {"output": {"volume": 2}}}, "session.audio.output.volume", "unknown_parameter"),
        (
            {"audio": {"input": {"transcription": {"model": "x", "delay": 1}}}},
            "session.audio.input.transcription.delay",
            None,
        ),
        (
            {"audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}},
            "session.audio.input.turn_detection.idle_timeout_ms",
            "unsupported_parameter",
        ),
        ({"include": ["message.output_audio.logprobs"]}, "session.include", "unsupported_parameter"),
        ({"include": "item.input_audio_transcription.logprobs"}, "session.include", "unsupported_parameter"),
        ({"prompt": {"id": "pmpt_1"}}, "session.prompt", "unsupported_parameter"),
        (
            {"truncation": {"type": "retention_ratio", "retention_ratio": 0.5}},
            "session.truncation",
            "unsupported_parameter",
        ),
        ({"model": 5}, "session.model", None),
    ],
)
def test_fields_that_would_change_the_answer_are_served_or_refused_by_name(update, param, code):
    with pytest.raises(RealtimeError) as error:
        ConversationSession().updated(update)
    assert error.value.param == param and (code is None or error.value.code == code)


def test_the_transcriptions_logprobs_are_served_when_included():
    session = ConversationSession().updated({"include": ["item.input_audio_transcription.logprobs"]})
    assert session.logprobs and session.as_event_session("s")["include"] == ["item.input_audio_transcription.logprobs"]
    assert not session.updated({"include": None}).logprobs


def test_fields_that_change_nothing_are_accepted():
    session = ConversationSession().updated(
        {"tracing": "auto", "include": [], "audio": {"input": {"noise_reduction": None}}, "truncation": None}
    )
    assert session == ConversationSession() and session.truncation == "auto"  # OpenAI's default
    assert session.updated({"truncation": "disabled"}).as_event_session("s")["truncation"] == "disabled"


@pytest.mark.parametrize(
    "params, param",
    [
        ({"conversation": "none"}, "response.conversation"),
        ({"input": [{"type": "message"}]}, "response.input"),
        ({"prompt": {"id": "pmpt_1"}}, "response.prompt"),
        ({"temperature": 0.2}, "response.temperature"),
        ({"audio": {"input": {}}}, "response.audio.input"),
    ],
)
def test_a_response_refuses_what_it_cannot_serve_by_name(params, param):
    with pytest.raises(RealtimeError) as error:
        ConversationSession().for_response(params)
    assert error.value.param == param
    assert (
        ConversationSession().for_response({"conversation": "auto", "metadata": {"turn": "1"}}) == ConversationSession()
    )


@pytest.mark.parametrize("kind", ["audio/pcmu", "audio/pcma"])
def test_telephone_audio_in_and_out(kind):
    session = ConversationSession().updated(
        {"audio": {"input": {"format": {"type": kind}}, "output": {"format": {"type": kind}}}}
    )
    assert session.input_format == session.output_format == AudioFormat(kind, 8000)
    shown = session.as_event_session("s")["audio"]
    assert shown["input"]["format"] == shown["output"]["format"] == {"type": kind}
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(24000) / 24000) * 32767).astype("<i2").tobytes()
    g711 = output_audio(tone, 24000, session.output_format)
    assert len(g711) == 8000  # one byte a sample at 8 kHz
    back = session.output_format.decode(g711)
    spectrum = np.abs(np.fft.rfft(back))
    assert abs(np.argmax(spectrum) * 8000 / len(back) - 440) < 2
