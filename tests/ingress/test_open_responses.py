"""Open Responses conformance in process (fake slots): every response object and stream event
held to the spec's required fields (tests/open_responses.py), the sampling values the slot
reports echoed, tools echoed in the spec's shape, POST /v1/responses/compact and its window
given back as input, and the WebSocket mode on /v1/responses (sequential turns, continuation
from connection-local state, its errors and the eviction rule, the connection's time limit,
authentication as on the other sockets)."""

from __future__ import annotations

import itertools
import json
import time

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from deployments.ingress.app import create_app
from deployments.ingress.serving import responses_socket
from deployments.protocol.errors import APIError
from deployments.protocol.generation import GenerationChunk, SamplingUsed
from graphs.config import GraphArgs
from tests.ingress import fakes
from tests.ingress.conftest import ingress_state, shipped_args
from tests.ingress.test_responses import WEATHER, chat_request, sse_events, tool_call_answer
from tests.open_responses import compaction_problems, event_problems, response_problems, socket_error_problems

MODEL = "ominix-tiny-qwen3"
CARD = SamplingUsed(temperature=0.2, top_p=0.9)


def reporting_defaults(request, *images, model=None):
    """As the LLM slot answers: its first chunk names the sampling it runs with, the model's
    defaults (here a card's 0.2 / 0.9) where the request leaves a value out."""
    chunks = fakes.generation("Paris.")(request, model=model)
    chunks[0].sampling = SamplingUsed(
        temperature=CARD.temperature if request.temperature is None else request.temperature,
        top_p=CARD.top_p if request.top_p is None else request.top_p,
        presence_penalty=request.presence_penalty or 0.0,
        frequency_penalty=request.frequency_penalty or 0.0,
    )
    return chunks


# ------------------------------------------------------------------ the response object


async def test_every_response_object_and_event_has_what_the_spec_requires(http, slots):
    slots["llm"].answers["chat"] = reporting_defaults
    body = {"model": MODEL, "input": "Capital of France?", "tools": [WEATHER]}
    r = await http.post("/v1/responses", json=body)
    assert r.status_code == 200 and response_problems(r.json()) == []
    events = await sse_events(http, body)
    assert event_problems(events) == []


async def test_the_sampling_the_slot_used_is_echoed(http, slots):
    """The model's defaults when the request leaves them out; the request's when it says."""
    slots["llm"].answers["chat"] = reporting_defaults
    r = (await http.post("/v1/responses", json={"model": MODEL, "input": "Hi"})).json()
    assert (r["temperature"], r["top_p"], r["presence_penalty"], r["frequency_penalty"]) == (0.2, 0.9, 0.0, 0.0)
    asked = {"temperature": 0.0, "top_p": 0.5, "presence_penalty": 0.5, "frequency_penalty": -0.5}
    r = (await http.post("/v1/responses", json={"model": MODEL, "input": "Hi", **asked})).json()
    assert {k: r[k] for k in asked} == asked
    chat = chat_request(slots)
    assert (chat.presence_penalty, chat.frequency_penalty) == (0.5, -0.5)  # served, not dropped


async def test_without_a_slot_report_the_requests_values_else_openais_defaults(http):
    """The fake's chunks report no sampling (as the CUDA route's): the request's, else 1.0."""
    r = (await http.post("/v1/responses", json={"model": MODEL, "input": "Hi", "top_p": 0.5})).json()
    assert (r["temperature"], r["top_p"], r["top_logprobs"], r["service_tier"]) == (1.0, 0.5, 0, "default")
    assert (r["max_tool_calls"], r["safety_identifier"], r["prompt_cache_key"]) == (None, None, None)


async def test_function_tools_are_echoed_in_the_specs_shape(http):
    bare = {"type": "function", "name": "now"}
    r = (await http.post("/v1/responses", json={"model": MODEL, "input": "Hi", "tools": [bare, WEATHER]})).json()
    assert r["tools"][0] == {**bare, "description": None, "parameters": None, "strict": True}
    assert r["tools"][1] == WEATHER
    assert response_problems(r) == []


async def test_assistant_phase_labels_are_kept_with_their_items(http, slots):
    items = [
        {"type": "message", "role": "assistant", "phase": "commentary", "content": "Checking."},
        {"type": "message", "role": "assistant", "phase": "final_answer", "content": "Four."},
        {"type": "message", "role": "user", "content": "Repeat the number."},
    ]
    r = await http.post("/v1/responses", json={"model": MODEL, "input": items})
    assert r.status_code == 200, r.text
    listed = (await http.get(f"/v1/responses/{r.json()['id']}/input_items?order=asc")).json()["data"]
    assert [item.get("phase") for item in listed] == ["commentary", "final_answer", None]
    bad = [{"type": "message", "role": "user", "phase": "commentary", "content": "Hi"}]
    r = await http.post("/v1/responses", json={"model": MODEL, "input": bad})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input"


async def test_a_fault_mid_stream_is_an_error_event_in_both_shapes(http, slots):
    def broken(request, *images, model=None):
        yield GenerationChunk(model=model, content="Hel")
        raise APIError(500, "The replica went away", "server_error")

    slots["llm"].answers["chat"] = broken
    events = await sse_events(http, {"model": MODEL, "input": "Hi"})
    error = next(e for e in events if e["type"] == "error")
    assert error["error"] == {
        "type": "server_error",
        "code": "server_error",
        "message": "The replica went away",
        "param": None,
    }
    assert error["code"] == "server_error"  # OpenAI's flat fields, which the openai SDK reads
    assert event_problems(events) == []


async def test_message_start_carries_the_prompts_tokens(http, slots):
    def counted(request, *images, model=None):
        chunks = fakes.generation("Hi")(request, model=model)
        chunks[0].prompt_tokens = 17
        return chunks

    slots["llm"].answers["chat"] = counted
    body = {"model": MODEL, "max_tokens": 8, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    r = await http.post("/v1/messages", json=body)
    start = json.loads(r.text.split("data: ", 1)[1].split("\n", 1)[0])
    assert start["type"] == "message_start" and start["message"]["usage"]["input_tokens"] == 17


# ------------------------------------------------------------------ compaction


def summary_answer(request, *images, model=None):
    return fakes.generation("The user's code word is slate.")(request, model=model)


CONVERSATION = [
    {"type": "message", "role": "user", "content": "Remember the code word: slate."},
    {"type": "message", "role": "assistant", "content": "OK."},
    {"type": "message", "role": "user", "content": "Compress this."},
]


async def test_compact_answers_the_user_messages_then_a_compaction_item(http, slots):
    slots["llm"].answers["chat"] = summary_answer
    r = await http.post("/v1/responses/compact", json={"model": MODEL, "input": CONVERSATION})
    assert r.status_code == 200, r.text
    compacted = r.json()
    assert compaction_problems(compacted) == []
    output = compacted["output"]
    assert [(i["type"], i.get("role")) for i in output] == [
        ("message", "user"),
        ("message", "user"),
        ("compaction", None),
    ]
    summarising = chat_request(slots)
    assert summarising.temperature == 0.0 and "Assistant: OK." in summarising.messages[1].content
    # The window given back as input: the summary reaches the model as the system prompt.
    follow = output + [{"type": "message", "role": "user", "content": "The code word?"}]
    r = await http.post("/v1/responses", json={"model": MODEL, "input": follow, "instructions": "Be brief."})
    assert r.status_code == 200, r.text
    system = chat_request(slots).messages[0]
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert "The user's code word is slate." in system.content
    assert [m.role for m in chat_request(slots).messages] == ["system", "user", "user", "user"]


async def test_compact_continues_a_stored_response(http, slots):
    first = (await http.post("/v1/responses", json={"model": MODEL, "input": "My name is Ada."})).json()
    slots["llm"].answers["chat"] = summary_answer
    r = await http.post("/v1/responses/compact", json={"model": MODEL, "previous_response_id": first["id"]})
    assert r.status_code == 200 and "User: My name is Ada." in chat_request(slots).messages[1].content


async def test_a_conversation_past_the_context_is_summarised_from_its_latest_turns(http, slots):
    def short_context(request, *images, model=None):
        if "Remember the code word" in request.messages[1].content:
            raise APIError(
                400, "The prompt has 9000 tokens", "invalid_request_error", "messages", "context_length_exceeded"
            )
        return summary_answer(request, model=model)

    slots["llm"].answers["chat"] = short_context
    r = await http.post("/v1/responses/compact", json={"model": MODEL, "input": CONVERSATION})
    assert r.status_code == 200 and compaction_problems(r.json()) == [], r.text
    assert chat_request(slots).messages[1].content == "User: Compress this."
    assert len([i for i in r.json()["output"] if i["type"] == "message"]) == 2  # every user message kept


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": CONVERSATION}, "model"),  # the spec's one required field
        ({"model": MODEL}, "input"),
        ({"model": MODEL, "previous_response_id": "resp_nope"}, "previous_response_id"),
    ],
)
async def test_bad_compact_requests_are_4xx_naming_the_field(http, slots, body, param):
    r = await http.post("/v1/responses/compact", json=body)
    assert r.status_code in (400, 404) and r.json()["error"]["param"] == param, r.text
    assert slots["llm"].calls == []


async def test_a_compaction_item_this_server_did_not_write_is_a_400(http, slots):
    forged = [{"type": "compaction", "encrypted_content": "gAAAAA-someone-elses"}, CONVERSATION[2]]
    r = await http.post("/v1/responses", json={"model": MODEL, "input": forged})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_encrypted_content"
    assert slots["llm"].calls == []


# ------------------------------------------------------------------ WebSocket mode


def create(**fields) -> str:
    return json.dumps({"type": "response.create", "model": MODEL, **fields})


def turn(ws) -> list[dict]:
    """One turn's events up to its terminal event (or its error envelope)."""
    events = []
    while True:
        event = ws.receive_json()
        events.append(event)
        if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
            return events
        if event["type"] == "error" and "status" in event:
            return events


def test_turns_run_one_after_another_on_one_socket(app):
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="first", store=False))
        ws.send_text(create(input="second", store=False))  # waits for the first to end
        first, second = turn(ws), turn(ws)
    assert event_problems(first) == [] and event_problems(second) == []
    assert first[-1]["response"]["id"] != second[-1]["response"]["id"]


def test_a_store_false_chain_continues_on_its_socket_only(app, slots):
    client = TestClient(app)
    with client.websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Remember cobalt.", store=False))
        first = turn(ws)[-1]["response"]
        ws.send_text(create(input="The word?", store=False, previous_response_id=first["id"]))
        second = turn(ws)
        assert event_problems(second) == []
        assert [m.content for m in chat_request(slots).messages] == ["Remember cobalt.", "Hello there", "The word?"]
    with client.websocket_connect("/v1/responses") as ws:  # a new socket: nothing kept, nothing stored
        ws.send_text(create(input="Again?", store=False, previous_response_id=first["id"]))
        (error,) = turn(ws)
        assert error["error"]["code"] == "previous_response_not_found" and socket_error_problems(error) == []
        ws.send_text(create(input="Start over.", store=False))  # the socket stays open
        assert turn(ws)[-1]["response"]["status"] == "completed"


def test_a_stored_response_continues_on_any_socket(app):
    client = TestClient(app)
    with client.websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Remember copper."))
        first = turn(ws)[-1]["response"]
    with client.websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="The word?", previous_response_id=first["id"]))
        assert turn(ws)[-1]["response"]["previous_response_id"] == first["id"]


def test_a_failed_continuation_evicts_the_response_it_continued(app):
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Remember ember.", store=False))
        first = turn(ws)[-1]["response"]
        unknown_call = [{"type": "function_call_output", "call_id": "call_missing", "output": "x"}]
        ws.send_text(create(input=unknown_call, store=False, previous_response_id=first["id"]))
        (failed,) = turn(ws)
        assert failed["status"] == 400 and failed["error"]["code"] == "unknown_call_id"
        ws.send_text(create(input="Again.", store=False, previous_response_id=first["id"]))
        (gone,) = turn(ws)
        assert gone["error"]["code"] == "previous_response_not_found"


def test_a_malformed_continuation_evicts_too(app):
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Remember ember.", store=False))
        first = turn(ws)[-1]["response"]
        ws.send_text(create(input="Again.", store=False, previous_response_id=first["id"], temperature=9))
        assert turn(ws)[0]["error"]["param"] == "temperature"
        ws.send_text(create(input="Again.", store=False, previous_response_id=first["id"]))
        assert turn(ws)[0]["error"]["code"] == "previous_response_not_found"


def test_a_fault_mid_stream_fails_the_turn_and_evicts(app, slots):
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Remember.", store=False))
        first = turn(ws)[-1]["response"]

        def broken(request, *images, model=None):
            yield GenerationChunk(model=model, content="Hel")
            raise APIError(500, "The replica went away", "server_error")

        slots["llm"].answers["chat"] = broken
        ws.send_text(create(input="Go on.", store=False, previous_response_id=first["id"]))
        events = turn(ws)
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"] and event_problems(events) == []
        slots["llm"].answers["chat"] = fakes.generation()
        ws.send_text(create(input="Go on.", store=False, previous_response_id=first["id"]))
        assert turn(ws)[0]["error"]["code"] == "previous_response_not_found"


@pytest.mark.parametrize(
    "message, param",
    [
        (create(input="Hi", stream=True), "stream"),
        (create(input="Hi", background=True), "background"),
        (create(input="Hi", stream_options={"include_usage": True}), "stream_options"),
        (json.dumps({"type": "response.cancel"}), "type"),
        ("not json", None),
        (create(input="Hi", temperature=5), "temperature"),
        (create(input="Hi", model="no-such-model"), "model"),
    ],
)
def test_bad_messages_get_the_error_envelope_and_the_socket_stays_open(app, slots, message, param):
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(message)
        (error,) = turn(ws)
        assert error["error"]["param"] == param and socket_error_problems(error) == [], error
        ws.send_text(create(input="Hi"))
        assert turn(ws)[-1]["type"] == "response.completed"


def test_the_connection_ends_at_its_time_limit(app, monkeypatch):
    monkeypatch.setattr(responses_socket, "CONNECTION_LIMIT_S", 0.2)
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        error = ws.receive_json()
        assert error["error"]["code"] == "websocket_connection_limit_reached" and socket_error_problems(error) == []
        assert ws.receive()["type"] == "websocket.close"


def test_the_socket_asks_for_the_key_as_the_other_sockets_do(slots, tmp_path):
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={"OMINIX_API_KEY": "secret"})
    client = TestClient(create_app(ingress_state(config, slots)))
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect("/v1/responses"):
            pass
    assert denied.value.status_code == 401
    for ask in ({"headers": {"Authorization": "Bearer secret"}}, {"subprotocols": ["bearer", "secret"]}):
        with client.websocket_connect("/v1/responses", **ask) as ws:
            ws.send_text(create(input="Hi"))
            assert turn(ws)[-1]["type"] == "response.completed"


def test_a_tool_call_streams_over_the_socket(app, slots):
    slots["llm"].answers["chat"] = tool_call_answer()
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Weather in Paris?", tools=[WEATHER], tool_choice="required"))
        events = turn(ws)
    assert event_problems(events) == []
    assert events[-1]["response"]["output"][0]["type"] == "function_call"


def test_a_client_that_leaves_mid_turn_stops_its_generation(app, slots):
    """Seen when it leaves, not when the next event would be sent: the next chunk here would
    come only after 30 s, and the generation is stopped long before."""

    def first_then_slow(request, *images, model=None):
        first, *rest = fakes.generation("Hello there")(request, model=model)
        return itertools.chain([first], fakes.slowly(lambda *a, model=None: rest, 30.0)(request))

    slots["llm"].answers["chat"] = first_then_slow
    with TestClient(app).websocket_connect("/v1/responses") as ws:
        ws.send_text(create(input="Talk a lot."))
        while ws.receive_json()["type"] != "response.output_text.delta":  # the first chunk's last event
            pass
    stream = slots["llm"].streams[-1]
    for _ in range(40):
        if stream.cancelled:
            break
        time.sleep(0.05)
    assert stream.cancelled and not stream.finished
