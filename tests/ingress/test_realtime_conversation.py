"""The Realtime conversation (`/v1/realtime`, no intent) in process: a real SessionHost behind
the ASR slot (the fakes' loudness VAD, a decoder that names each utterance's length), fake LLM
and TTS slots. Each server-VAD turn transcribed then answered by the agent pipeline as OpenAI's
response events; manual commits, text turns and text-only responses; the conversation's history
reaching the LLM; every event as the openai SDK types it; response.cancel and barge-in stopping the LLM and TTS streams; bad events as
error events on an open socket; the model on the URL (the key: tests/ingress/test_realtime.py);
function tools: a call as its own output item, its output added back and answered."""

from __future__ import annotations

import base64
import concurrent.futures
from collections.abc import Callable

import numpy as np
import pytest
from starlette.testclient import TestClient

from deployments.audio.g711 import alaw_encode, ulaw_encode
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import FunctionCall, ToolCall
from tests.ingress import fakes
from tests.ingress.fakes import pcm, streaming_asr
from tests.ingress.test_realtime import append, until

URL = "/v1/realtime"
ANSWER = "Paris is the capital of France. It is a big city! Bye"
SENTENCES = ["Paris is the capital of France.", "It is a big city!", "Bye"]
RATE = 24000  # the session's input and output rate (OpenAI's)


@pytest.fixture
def slots(slots, host):
    slots["asr"] = streaming_asr(host)
    slots["llm"].answers["chat"] = fakes.generation(ANSWER)
    return slots


def say(ws, seconds: float = 0.6, pause_s: float = 0.8) -> None:
    """An utterance the server VAD ends: loud audio, then a pause."""
    append(ws, pcm(seconds, True, rate=RATE))
    append(ws, pcm(pause_s, False, rate=RATE))


def connect(app, url: str = URL):
    ws = TestClient(app).websocket_connect(url)
    return ws


def typed(events: list[dict]) -> list[dict]:
    """`events`, each checked against the openai SDK's type for it (its name, fields, literals)."""
    from openai.types.realtime import RealtimeServerEvent
    from pydantic import TypeAdapter

    adapter = TypeAdapter(RealtimeServerEvent)
    for e in events:
        adapter.validate_python(e)
    return events


def in_flight(slots) -> list:
    return [s for name in ("llm", "tts") for s in slots[name].streams if s.in_flight]


def chats(slots) -> list:
    return [args[0] for method, args, _ in slots["llm"].calls if method == "chat"]


def syntheses(slots) -> list[str]:
    return [args[0].text for method, args, _ in slots["tts"].calls if method == "synthesize"]


def test_a_spoken_turn_is_transcribed_then_answered_in_speech(app, slots, host):
    with connect(app) as ws:
        [created] = typed([ws.receive_json()])
        assert created["type"] == "session.created" and created["session"]["type"] == "realtime"
        assert created["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": RATE}
        update = {"type": "realtime", "instructions": "Answer briefly.", "audio": {"output": {"voice": "alba"}}}
        ws.send_json({"type": "session.update", "session": update})
        [updated] = typed([ws.receive_json()])
        assert updated["type"] == "session.updated" and updated["session"]["instructions"] == "Answer briefly."
        assert updated["session"]["audio"]["output"]["voice"] == "alba"
        say(ws)
        events = typed(until(ws, "response.done"))
        kinds = [e["type"] for e in events]
        assert kinds[:6] == [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.delta",
            "conversation.item.input_audio_transcription.completed",
            "conversation.item.added",
        ]
        heard = events[4]["transcript"]
        assert heard.startswith("utterance of") and events[5]["item"]["content"][0]["transcript"] == heard
        assert kinds[6:10] == [
            "response.created",
            "response.output_item.added",
            "conversation.item.added",
            "response.content_part.added",
        ]
        body = kinds[10:-5]
        assert body == ["response.output_audio_transcript.delta", "response.output_audio.delta"] * 3
        assert kinds[-5:] == [
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.done",
        ]
        deltas = [e for e in events if e["type"] == "response.output_audio_transcript.delta"]
        transcript = " ".join(SENTENCES)
        assert "".join(e["delta"] for e in deltas) == transcript
        assert events[-4]["transcript"] == transcript
        audio = [base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"]
        assert [len(a) for a in audio] == [2 * int(0.1 * RATE)] * 3  # the fake's 0.1 s per sentence, PCM16
        done = events[-1]["response"]
        assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"] == transcript
        response_id = events[6]["response"]["id"]
        assert {e["response_id"] for e in events if e["type"].startswith("response.output")} == {response_id}
        # The LLM got the instructions and the transcript; the TTS the voice and each sentence.
        [chat] = chats(slots)
        assert [(m.role, m.content) for m in chat.messages] == [("system", "Answer briefly."), ("user", heard)]
        assert syntheses(slots) == ["", *SENTENCES]
        assert {args[0].voice for m, args, _ in slots["tts"].calls} == {"alba"}
        # A second turn: the LLM sees the first one, answer included.
        say(ws, 1.0)
        second = until(ws, "response.done")
        assert second[-1]["response"]["status"] == "completed"
        roles = [(m.role, m.content) for m in chats(slots)[1].messages]
        assert roles[1:3] == [("user", heard), ("assistant", transcript)] and roles[3][0] == "user"
        assert roles[3][1] != heard  # the second utterance is longer
    assert not in_flight(slots)
    assert host.stats["partials"] == 0 and host.stats["finals"] == 2  # no decode spent on a partial


def test_manual_commit_then_a_text_only_response(app, slots):
    with connect(app) as ws:
        ws.receive_json()
        session = {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}}}
        ws.send_json({"type": "session.update", "session": session})
        assert ws.receive_json()["session"]["output_modalities"] == ["text"]
        say(ws)
        ws.send_json({"type": "input_audio_buffer.commit"})
        events = until(ws, "conversation.item.added")
        assert "input_audio_buffer.speech_started" not in [e["type"] for e in events]  # no server VAD
        ws.send_json({"type": "response.create"})
        events = typed(until(ws, "response.done"))
        kinds = [e["type"] for e in events]
        assert kinds.count("response.output_text.delta") == 3 and "response.output_audio.delta" not in kinds
        assert events[-1]["response"]["output"][0]["content"][0] == {"type": "output_text", "text": " ".join(SENTENCES)}
        assert not syntheses(slots)  # text only: the TTS slot is never called


def test_a_text_message_and_a_response_that_overrides_the_session(app, slots):
    with connect(app) as ws:
        ws.receive_json()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Capital of France?"}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        added = ws.receive_json()
        assert (
            added["type"] == "conversation.item.added" and added["item"]["content"][0]["text"] == "Capital of France?"
        )
        params = {"instructions": "Be terse.", "max_output_tokens": 20, "audio": {"output": {"voice": "marius"}}}
        ws.send_json({"type": "response.create", "response": params})
        events = until(ws, "response.done")
        assert events[-1]["response"]["status"] == "completed"
        [chat] = chats(slots)
        assert [(m.role, m.content) for m in chat.messages] == [("system", "Be terse."), ("user", "Capital of France?")]
        assert chat.max_tokens == 20 and slots["tts"].calls[-1][1][0].voice == "marius"


@pytest.mark.parametrize("cancelled_as", [None, concurrent.futures.CancelledError])  # asyncio's, Ray's
def test_response_cancel_stops_the_llm_and_the_synthesis(app, slots, cancelled_as):
    long = fakes.generation(ANSWER + " " + "More words. " * 50)
    slots["llm"].answers["chat"] = fakes.slowly(long, 0.005, cancelled_as)
    slots["tts"].answers["synthesize"] = fakes.slowly(fakes.speech(), 0.1, cancelled_as)  # the cancel lands here
    with connect(app) as ws:
        ws.receive_json()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Talk."}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        ws.send_json({"type": "response.create"})
        until(ws, "response.output_audio.delta")  # it is speaking
        ws.send_json({"type": "response.cancel"})
        events = typed(until(ws, "response.done"))
        assert "error" not in [e["type"] for e in events]
        done = events[-1]["response"]
        assert done["status"] == "cancelled" and done["status_details"]["reason"] == "client_cancelled"
        assert done["output"][0]["status"] == "incomplete"
        assert slots["llm"].streams[0].cancelled and not in_flight(slots)
        ws.send_json({"type": "response.cancel", "event_id": "again"})
        error = ws.receive_json()
        assert error["error"]["code"] == "response_cancel_not_active" and error["error"]["event_id"] == "again"


def talk_over_a_long_answer(ws, slots, heard: int = 1) -> None:
    """A turn whose long answer is speaking (`heard` audio chunks reached the client) when the
    user talks over it."""
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(ANSWER + " " + "More words. " * 50), 0.02)
    ws.receive_json()
    say(ws)
    for _ in range(heard):
        until(ws, "response.output_audio.delta")
    append(ws, pcm(0.6, True, rate=RATE))


def test_speech_starting_during_a_response_cancels_it(app, slots):
    with connect(app) as ws:
        talk_over_a_long_answer(ws, slots)
        events = until(ws, "response.done")
        started = [e["type"] for e in events].index("input_audio_buffer.speech_started")
        assert started < len(events) - 1  # speech was heard first, then the response ended
        done = events[-1]["response"]
        assert done["status"] == "cancelled" and done["status_details"]["reason"] == "turn_detected"
        assert not in_flight(slots)
        said = done["output"][0]["content"][0]["transcript"]
        assert said.startswith("Paris is the capital of France.") and "More words." * 40 not in said
        # The interrupting utterance gets its own answer, with the cut-short one in its history.
        append(ws, pcm(0.8, False, rate=RATE))
        until(ws, "response.created")
        ws.send_json({"type": "response.cancel"})
        until(ws, "response.done")
        history = [(m.role, m.content) for m in chats(slots)[1].messages]
        assert history[1] == ("assistant", said)
    assert not in_flight(slots)


def test_an_llm_failure_is_a_failed_response_and_the_session_goes_on(app, slots):
    slots["llm"].answers["chat"] = lambda request, model=None: [RuntimeError("engine died")]
    with connect(app) as ws:
        ws.receive_json()
        say(ws)
        events = typed(until(ws, "response.done"))
        assert [e["type"] for e in events[-3:]] == ["response.created", "error", "response.done"]
        done = events[-1]["response"]
        assert done["status"] == "failed" and "engine died" in done["status_details"]["error"]["message"]
        assert done["output"] == []  # nothing was said: no message item was opened
        slots["llm"].answers["chat"] = fakes.generation(ANSWER)
        ws.send_json({"type": "response.create"})
        assert until(ws, "response.done")[-1]["response"]["status"] == "completed"


def test_an_unknown_voice_fails_the_response(app, slots):
    unknown = APIError(404, "Voice 'nobody' not found", "invalid_request_error", "voice", "voice_not_found")
    slots["tts"].answers["synthesize"] = lambda params, model=None: [unknown]
    with connect(app) as ws:
        ws.receive_json()
        ws.send_json({"type": "session.update", "session": {"audio": {"output": {"voice": "nobody"}}}})
        ws.receive_json()
        say(ws)
        events = until(ws, "response.done")
        [error] = [e for e in events if e["type"] == "error"]
        assert error["error"]["code"] == "voice_not_found" and error["error"]["param"] == "voice"
        assert events[-1]["response"]["status"] == "failed" and not in_flight(slots)


@pytest.mark.parametrize(
    "message, code, param",
    [
        ("{not json", "invalid_json", None),
        ({"type": "response.create"}, "no_user_message", None),
        ({"type": "response.cancel"}, "response_cancel_not_active", None),
        ({"type": "response.create", "response": {"output_modalities": ["audio", "text"]}}, None, None),
        ({"type": "session.update", "session": {"type": "transcription"}}, None, "session.type"),
        ({"type": "session.update", "session": {"output_modalities": "audio"}}, None, "session.output_modalities"),
        ({"type": "session.update", "session": {"instructions": 3}}, None, "session.instructions"),
        ({"type": "session.update", "session": {"max_output_tokens": 0}}, None, "session.max_output_tokens"),
        (
            {"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/opus"}}}}},
            None,
            "session.audio.output.format.type",
        ),
        ({"type": "conversation.item.create", "item": {"role": "assistant", "content": []}}, None, "item"),
        (
            {"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_image"}]}},
            None,
            "item.content",
        ),
        ({"type": "output_audio_buffer.clear"}, "unknown_event", "type"),  # WebRTC's: no such buffer here
        ({"type": "conversation.item.delete", "item_id": "item_nope"}, "item_not_found", "item_id"),
        ({"type": "conversation.item.retrieve"}, "item_not_found", "item_id"),
        ({"type": "conversation.item.create", "item": {"role": "user", "content": []}}, None, "item.content"),
    ],
)
def test_bad_events_get_error_events_and_the_socket_stays_open(app, message, code, param):
    with connect(app) as ws:
        ws.receive_json()
        ws.send_text(message) if isinstance(message, str) else ws.send_json(message)
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["message"]
        if code:
            assert error["error"]["code"] == code
        if param:
            assert error["error"]["param"] == param
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Still there?"}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        assert ws.receive_json()["type"] == "conversation.item.added"  # still serving


def test_a_response_while_one_is_in_progress_is_refused(app, slots):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(ANSWER), 0.2)
    with connect(app) as ws:
        ws.receive_json()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Talk."}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        ws.send_json({"type": "response.create"})
        until(ws, "response.created")
        ws.send_json({"type": "response.create"})
        events = until(ws, "error")
        assert events[-1]["error"]["code"] == "conversation_already_has_active_response"
        assert until(ws, "response.done")[-1]["response"]["status"] == "completed"


def test_the_llm_is_named_on_the_url(app, slots):
    with connect(app, URL + "?model=no-such-llm") as ws:
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["param"] == "model"
    with connect(app, URL + "?model=ominix-tiny-qwen3") as ws:
        ws.receive_json()
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        ws.send_json({"type": "response.create"})
        until(ws, "response.done")
    assert slots["llm"].calls[-1][2] == "ominix-tiny-qwen3"
    with connect(app) as ws:  # the default LLM, then the one a session.update names
        assert ws.receive_json()["session"]["model"] is None  # the LLM slot's default
        ws.send_json({"type": "session.update", "session": {"model": "no-such-llm"}})
        error = ws.receive_json()
        assert (error["error"]["param"], error["error"]["code"]) == ("session.model", "model_not_found")
        ws.send_json({"type": "session.update", "session": {"model": "ominix-tiny-qwen3"}})
        assert ws.receive_json()["session"]["model"] == "ominix-tiny-qwen3"
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
        ws.send_json({"type": "conversation.item.create", "item": item})
        ws.send_json({"type": "response.create"})
        until(ws, "response.done")
    assert slots["llm"].calls[-1][2] == "ominix-tiny-qwen3"


def test_a_socket_closed_mid_response_stops_both_slots(app, slots, host):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(ANSWER + " More words." * 50), 0.02)
    with connect(app) as ws:
        ws.receive_json()
        say(ws)
        until(ws, "response.output_audio.delta")
    # The server finishes its side of the close on its own loop.
    from tests.assertions import wait_for

    wait_for(lambda: not in_flight(slots) and len(host.table) == 0, timeout_s=10)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def calling(arguments: str, text: str = "") -> Callable[..., list]:
    """An LLM stream that (after `text`, if any) calls get_weather with `arguments`."""

    def answer(request, model=None) -> list[GenerationChunk]:
        said = fakes.generation(text)(request, model=model)[:-1] if text else []
        call = ToolCall(id="call_abc", function=FunctionCall(name="get_weather", arguments=arguments))
        chunks = [*said, GenerationChunk(tool_calls=[call]), GenerationChunk(finish_reason="tool_calls")]
        chunks[0].model = model or "ominix-tiny-qwen3"
        return chunks

    return answer


def ask(ws, text: str = "Weather in Paris?", response: dict | None = None) -> list[dict]:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    ws.send_json({"type": "conversation.item.create", "item": item})
    ws.send_json({"type": "response.create", **({"response": response} if response else {})})
    return typed(until(ws, "response.done"))


def test_a_function_call_round_trip(app, slots):
    slots["llm"].answers["chat"] = calling('{"city": "Paris"}')
    with connect(app) as ws:
        ws.receive_json()
        session = {"type": "realtime", "output_modalities": ["text"], "tools": [WEATHER]}
        ws.send_json({"type": "session.update", "session": session})
        updated = ws.receive_json()["session"]
        assert updated["tools"] == [WEATHER] and updated["tool_choice"] == "auto"
        events = ask(ws)
        kinds = [e["type"] for e in events]
        assert kinds[kinds.index("response.created") :] == [
            "response.created",
            "response.output_item.added",
            "conversation.item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.done",
        ]  # only a call: no message item
        arguments = events[-3]
        assert (arguments["name"], arguments["arguments"], arguments["call_id"]) == (
            "get_weather",
            '{"city": "Paris"}',
            "call_abc",
        )
        done = events[-1]["response"]
        assert done["status"] == "completed" and [i["type"] for i in done["output"]] == ["function_call"]
        assert done["output"][0] == {**events[-2]["item"], "status": "completed"}
        [chat] = chats(slots)
        assert [t.model_dump(exclude_none=True) for t in chat.tools] == [
            {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters")}}
        ]
        assert chat.tool_choice == "auto"
        # The client runs the function and hands back its output; the next response answers with it.
        output = {"type": "function_call_output", "call_id": "call_abc", "output": '{"sky": "sunny"}'}
        ws.send_json({"type": "conversation.item.create", "item": output})
        [added] = typed([ws.receive_json()])
        assert added["type"] == "conversation.item.added" and added["item"]["output"] == '{"sky": "sunny"}'
        assert added["previous_item_id"] == events[-2]["item"]["id"]
        slots["llm"].answers["chat"] = fakes.generation("It is sunny in Paris.")
        ws.send_json({"type": "response.create"})
        answered = typed(until(ws, "response.done"))
        assert answered[-1]["response"]["output"][0]["content"][0]["text"] == "It is sunny in Paris."
        turns = chats(slots)[1].messages
        assert [m.role for m in turns] == ["user", "assistant", "tool"]
        assert turns[1].tool_calls[0].id == "call_abc" and turns[1].tool_calls[0].function.name == "get_weather"
        assert (turns[2].tool_call_id, turns[2].content) == ("call_abc", '{"sky": "sunny"}')
        # An output for a call nobody made, or made and answered already, is refused.
        ws.send_json({"type": "conversation.item.create", "item": output})
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["param"] == "item.call_id"


def test_words_then_a_call_are_two_output_items_and_speech(app, slots):
    slots["llm"].answers["chat"] = calling('{"city": "Oslo"}', text="Let me check.")
    with connect(app) as ws:
        ws.receive_json()
        ws.send_json({"type": "session.update", "session": {"tools": [WEATHER]}})
        ws.receive_json()
        events = ask(ws, response={"tool_choice": {"type": "function", "name": "get_weather"}})
        kinds = [e["type"] for e in events]
        assert "response.output_audio.delta" in kinds and syntheses(slots) == ["", "Let me check."]
        message_done = kinds.index("response.output_item.done")
        assert kinds.index("response.function_call_arguments.done") > message_done  # the call after the words
        output = events[-1]["response"]["output"]
        assert [(i["type"], i["status"]) for i in output] == [("message", "completed"), ("function_call", "completed")]
        assert output[0]["content"][0]["transcript"] == "Let me check."
        calls = [e for e in events if e["type"].startswith("response.function_call_arguments")]
        assert {e["output_index"] for e in calls} == {1}
        [chat] = chats(slots)
        assert chat.tool_choice.function.name == "get_weather"  # the response's own choice
        # The session's choice is unchanged for the next response.
        slots["llm"].answers["chat"] = fakes.generation("Done.")
        ws.send_json(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": "call_abc", "output": "5 C"},
            }
        )
        ws.receive_json()
        ws.send_json({"type": "response.create"})
        until(ws, "response.done")
        assert chats(slots)[1].tool_choice == "auto"
        assert chats(slots)[1].messages[1].content == "Let me check."  # the words said before the call


@pytest.mark.parametrize(
    "message, param",
    [
        (
            {"type": "session.update", "session": {"tools": [{"type": "mcp", "server_label": "x"}]}},
            "session.tools[0].type",
        ),
        ({"type": "session.update", "session": {"tools": {"type": "function"}}}, "session.tools"),
        ({"type": "session.update", "session": {"tool_choice": "required"}}, "session.tool_choice"),
        (
            {
                "type": "session.update",
                "session": {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
            },
            "session.tool_choice",
        ),
        ({"type": "response.create", "response": {"tools": [{"type": "function"}]}}, "response.tools[0].name"),
        ({"type": "conversation.item.create", "item": {"type": "function_call_output", "output": "x"}}, "item.call_id"),
        (
            {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": "c", "output": 3}},
            "item.output",
        ),
    ],
)
def test_tools_that_are_not_served_are_error_events_naming_the_field(app, slots, message, param):
    with connect(app) as ws:
        ws.receive_json()
        ws.send_json(message)
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["param"] == param
        ws.send_json({"type": "session.update", "session": {}})
        assert ws.receive_json()["session"]["tools"] == []  # nothing of the refused update was applied


def test_items_are_retrieved_deleted_and_placed_and_a_response_counts_its_tokens(app, slots):
    with connect(app) as ws:
        ws.receive_json()
        events = ask(ws, "First question.", response={"output_modalities": ["text"]})
        usage = events[-1]["response"]["usage"]
        words = len(ANSWER.split(" "))
        assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (3, words, 3 + words)
        first_id = events[0]["item"]["id"]
        ws.send_json({"type": "conversation.item.retrieve", "item_id": first_id})
        [retrieved] = typed([ws.receive_json()])
        assert (
            retrieved["type"] == "conversation.item.retrieved"
            and retrieved["item"]["content"][0]["text"] == "First question."
        )
        ws.send_json({"type": "conversation.item.delete", "item_id": first_id})
        [deleted] = typed([ws.receive_json()])
        assert (deleted["type"], deleted["item_id"]) == ("conversation.item.deleted", first_id)
        system = {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Speak French."}]}
        ws.send_json({"type": "conversation.item.create", "previous_item_id": "root", "item": system})
        assert ws.receive_json()["previous_item_id"] is None
        ask(ws, "Second question.")
        roles = [(m.role, m.content) for m in chats(slots)[1].messages]
        assert roles == [("system", "Speak French."), ("assistant", ANSWER), ("user", "Second question.")]


def test_after_a_barge_in_the_conversation_keeps_what_was_played(app, slots):
    with connect(app) as ws:
        talk_over_a_long_answer(ws, slots, heard=2)  # two sentences' audio (0.1 s each) reached the client
        done = until(ws, "response.done")[-1]["response"]
        assert done["status"] == "cancelled"
        answer = done["output"][0]
        # The client had played the first sentence and part of the second when the user spoke.
        ws.send_json(
            {"type": "conversation.item.truncate", "item_id": answer["id"], "content_index": 0, "audio_end_ms": 150}
        )
        [truncated] = typed([ws.receive_json()])
        assert (truncated["type"], truncated["item_id"], truncated["audio_end_ms"]) == (
            "conversation.item.truncated",
            answer["id"],
            150,
        )
        ws.send_json({"type": "conversation.item.retrieve", "item_id": answer["id"]})
        assert ws.receive_json()["item"]["content"][0]["transcript"] == SENTENCES[0]
        ws.send_json(
            {"type": "conversation.item.truncate", "item_id": answer["id"], "content_index": 0, "audio_end_ms": 10**6}
        )
        assert ws.receive_json()["error"]["param"] == "audio_end_ms"
        slots["llm"].answers["chat"] = fakes.generation(ANSWER)
        append(ws, pcm(0.8, False, rate=RATE))  # the interrupting utterance ends: it is answered
        until(ws, "response.done")
        history = [(m.role, m.content) for m in chats(slots)[1].messages]
        assert history[1] == ("assistant", SENTENCES[0])  # what was heard, not what was written


@pytest.mark.parametrize("truncation", ["auto", "disabled"])
def test_a_conversation_past_the_context_leaves_its_oldest_turns_out_unless_told_not_to(app, slots, truncation):
    def small_context(request, model=None):
        if len(request.messages) > 4:  # the system prompt and three more messages fit
            full = APIError(
                400, "The prompt is too long", "invalid_request_error", "messages", "context_length_exceeded"
            )
            return [full]
        return fakes.generation("Sure.")(request, model=model)

    slots["llm"].answers["chat"] = small_context
    with connect(app) as ws:
        ws.receive_json()
        session = {"instructions": "Be brief.", "output_modalities": ["text"], "truncation": truncation}
        ws.send_json({"type": "session.update", "session": session})
        assert ws.receive_json()["session"]["truncation"] == truncation
        assert ask(ws, "One.")[-1]["response"]["status"] == "completed"
        assert ask(ws, "Two.")[-1]["response"]["status"] == "completed"  # 4 messages: it fits
        third = ask(ws, "Three.")
    if truncation == "disabled":
        assert third[-1]["response"]["status"] == "failed"
        assert [e["error"]["code"] for e in third if e["type"] == "error"] == ["context_length_exceeded"]
        return
    assert third[-1]["response"]["status"] == "completed"
    sent = [(m.role, m.content) for m in chats(slots)[-1].messages]
    assert sent == [("system", "Be brief."), ("user", "Two."), ("assistant", "Sure."), ("user", "Three.")]


@pytest.mark.parametrize("kind, encode", [("audio/pcmu", ulaw_encode), ("audio/pcma", alaw_encode)])
def test_a_telephone_call_in_g711_is_heard_and_answered_in_g711(app, slots, kind, encode):
    with connect(app) as ws:
        ws.receive_json()
        audio = {"input": {"format": {"type": kind}}, "output": {"format": {"type": kind}}}
        ws.send_json({"type": "session.update", "session": {"audio": audio}})
        assert ws.receive_json()["session"]["audio"]["output"]["format"] == {"type": kind}
        loud, quiet = (np.frombuffer(pcm(s, on, rate=8000), "<i2") for s, on in ((0.6, True), (0.8, False)))
        append(ws, encode(loud))  # a phone line's bytes: one a sample, 8 kHz
        append(ws, encode(quiet))
        events = typed(until(ws, "response.done"))
        heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
        assert heard["transcript"].startswith("utterance of")
        audio_out = [base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta"]
        assert [len(a) for a in audio_out] == [int(0.1 * 8000)] * 3  # the fake's 0.1 s per sentence, 8-bit at 8 kHz
        assert events[-1]["response"]["audio"]["output"]["format"] == {"type": kind}


def test_semantic_vad_holds_an_unfinished_turn_until_its_longest_pause(app, slots):
    """semantic_vad (the Agents SDK's default turn detection): a pause after words that do not
    sound finished (the fake decoder's "utterance of 0.90 s" ends no sentence) does not end the
    turn; the longest pause of the eagerness (high: 2 s) does, and the turn is answered."""
    with connect(app) as ws:
        ws.receive_json()
        turn = {"type": "semantic_vad", "eagerness": "high"}
        ws.send_json({"type": "session.update", "session": {"audio": {"input": {"turn_detection": turn}}}})
        shown = ws.receive_json()["session"]["audio"]["input"]["turn_detection"]
        assert shown == {**turn, "create_response": True, "interrupt_response": True}
        append(ws, pcm(0.6, True, rate=RATE))
        append(ws, pcm(0.5, False, rate=RATE))  # a pause the words do not end: held
        ws.send_json({"type": "input_audio_buffer.append", "audio": "!!!"})  # a marker: the next event
        held = until(ws, "error")
        assert [e["type"] for e in held] == ["input_audio_buffer.speech_started", "error"]
        append(ws, pcm(1.6, False, rate=RATE))  # 2.1 s of pause in all: the turn ends
        events = typed(until(ws, "response.done"))
        kinds = [e["type"] for e in events]
        assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("input_audio_buffer.committed")
        heard = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
        assert heard["transcript"].startswith("utterance of") and events[-1]["response"]["status"] == "completed"


@pytest.mark.parametrize("name", ["gpt-realtime", "gpt-realtime-2.1", "gpt-4o-mini-realtime-preview"])
def test_openais_realtime_model_names_are_the_sessions_pipeline(app, slots, name):
    """The Agents SDK names gpt-realtime-2.1 unless told otherwise: OpenAI's speech-to-speech
    names mean this session's pipeline, answered by the LLM slot's default."""
    with connect(app, URL + f"?model={name}") as ws:
        assert ws.receive_json()["session"]["model"] is None
        ws.send_json({"type": "session.update", "session": {"model": name, "output_modalities": ["text"]}})
        assert ws.receive_json()["session"]["model"] is None
        assert ask(ws)[-1]["response"]["status"] == "completed"
    assert slots["llm"].calls[-1][2] is None  # the LLM slot's default
