"""POST /v1/agent/stream in process: the LLM's answer cut into sentences, each synthesized by
the TTS slot, framed as MiniInfer's SSE; bad input and failures before the first byte keep
their status, failures after it become an error event then [DONE]."""

import base64
import json

import pytest

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

ANSWER = "Paris is the capital of France. It is a big city! Bye"


def events_of(r) -> list:
    lines = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


@pytest.fixture
def slots():
    slots = default_slots()
    slots["llm"].answers["chat"] = fakes.generation(ANSWER)
    return slots


async def test_each_sentence_then_its_audio(http, slots):
    r = await http.post("/v1/agent/stream", json={"input": "Tell me about Paris", "voice": "alba"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-audio-sample-rate"] == str(fakes.SAMPLE_RATE)
    events = events_of(r)
    assert events[0] == {
        "type": "meta",
        "model": "ominix-tiny-qwen3",  # the model the LLM stream names
        "voice": "alba",
        "sample_rate": fakes.SAMPLE_RATE,
        "format": "pcm_s16le",
    }
    assert [e["type"] for e in events[1:]] == ["text", "audio"] * 3
    assert [e["text"] for e in events if e["type"] == "text"] == [
        "Paris is the capital of France.",
        "It is a big city!",
        "Bye",
    ]
    pcm = base64.b64decode(events[2]["delta"])
    assert len(pcm) == 2 * int(0.1 * fakes.SAMPLE_RATE)  # s16le of the fake's 0.1 s
    # The empty probe (model and voice check), then one synthesis per sentence, in order.
    synth = [args[0] for method, args, _ in slots["tts"].calls if method == "synthesize"]
    assert [p.text for p in synth] == ["", "Paris is the capital of France.", "It is a big city!", "Bye"]
    assert {p.voice for p in synth} == {"alba"}


async def test_the_llm_gets_system_earlier_turns_and_the_input(http, slots):
    body = {
        "input": "And Spain?",
        "system": "Answer briefly.",
        "messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris."}],
        "max_tokens": 40,
        "temperature": 0,
        "model": "ominix-tiny-qwen3",
    }
    assert (await http.post("/v1/agent/stream", json=body)).status_code == 200
    [(method, (chat,), model)] = slots["llm"].calls
    assert method == "chat" and model == "ominix-tiny-qwen3" and chat.stream
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "Answer briefly."),
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "And Spain?"),
    ]
    assert chat.max_tokens == 40 and chat.temperature == 0


@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "input"),
        ({"input": "   "}, "input"),
        ({"input": "hi", "max_tokens": 0}, "max_tokens"),
        ({"input": "hi", "speed": 9}, "speed"),
        ({"input": "hi", "messages": [{"role": "wizard", "content": "x"}]}, None),
        ({"input": 3}, "input"),
    ],
)
async def test_bad_input_is_a_400_before_any_slot_is_called(http, slots, body, param):
    assert_openai_error(await http.post("/v1/agent/stream", json=body), 400, param=param)
    assert not slots["llm"].calls and not slots["tts"].calls


async def test_an_unknown_model_is_a_404(http, slots):
    for field in ("model", "tts_model"):
        r = await http.post("/v1/agent/stream", json={"input": "hi", field: "gpt-4o"})
        assert_openai_error(r, 404, code="model_not_found")
    assert not slots["llm"].calls


async def test_an_unknown_voice_keeps_its_404_and_stops_the_generation(http, slots):
    from deployments.protocol.errors import APIError

    unknown = APIError(404, "Voice 'nobody' not found", "invalid_request_error", "voice", "voice_not_found")
    slots["tts"].answers["synthesize"] = lambda params, model=None: [unknown]
    r = await http.post("/v1/agent/stream", json={"input": "hi", "voice": "nobody"})
    assert_openai_error(r, 404, param="voice", code="voice_not_found")
    assert slots["llm"].streams[0].cancelled  # the LLM stream opened alongside is stopped


async def test_an_llm_error_mid_stream_is_an_error_event_then_done(http, slots):
    good = fakes.generation("First sentence here. Second")

    def failing(request, model=None):
        return [*good(request)[:4], RuntimeError("engine died")]

    slots["llm"].answers["chat"] = failing
    events = events_of(await http.post("/v1/agent/stream", json={"input": "hi"}))
    assert [e.get("type") for e in events[:3]] == ["meta", "text", "audio"]
    assert events[-1]["error"]["type"] == "server_error"


async def test_a_tts_error_mid_stream_is_an_error_event_then_done(http, slots):
    calls = []

    def synthesize(params, model=None):
        calls.append(params.text)
        if len(calls) == 3:  # the probe, the first sentence, then this one fails
            return [fakes.SpeechChunk(sample_rate=fakes.SAMPLE_RATE), RuntimeError("vocoder died")]
        return fakes.speech()(params)

    slots["tts"].answers["synthesize"] = synthesize
    events = events_of(await http.post("/v1/agent/stream", json={"input": "hi"}))
    assert [e.get("type") for e in events[:4]] == ["meta", "text", "audio", "text"]
    assert "vocoder died" in events[-1]["error"]["message"]


async def test_the_route_needs_the_key_when_keys_are_set(tmp_path):
    import httpx

    args = shipped_args(cache_dir=str(tmp_path), security={"api_keys": ["k1"]})
    app = create_app(ingress_state(GraphArgs.from_args(args, environ={}), default_slots()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert_openai_error(await c.post("/v1/agent/stream", json={"input": "hi"}), 401)
        r = await c.post("/v1/agent/stream", json={"input": "hi"}, headers={"Authorization": "Bearer k1"})
        assert r.status_code == 200


async def test_the_body_cap_applies(http):
    r = await http.post("/v1/agent/stream", content=b'{"input": "' + b"x" * (2 * 1024 * 1024) + b'"}')
    assert_openai_error(r, 413, code="request_too_large")
