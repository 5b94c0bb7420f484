"""The ingress's own behaviour in process: routing to slots, responses, disabled slots."""

from __future__ import annotations

import json

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args


async def test_health_answers_without_touching_a_slot(http, slots):
    r = await http.get("/health")
    assert r.status_code == 200 and r.json()["status"] == "healthy"
    assert all(not client.calls for client in slots.values())


async def test_chat_is_assembled_from_the_slot_stream(http, slots):
    r = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    body = r.json()
    assert r.status_code == 200, body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] == "Hello there"
    assert body["usage"]["completion_tokens"] == 2 and body["model"] == "ominix-tiny-qwen3"
    method, _, model = slots["llm"].calls[0]
    assert method == "chat" and model is None  # no model named: the slot's current default


async def test_streamed_chat_frames_sse_and_ends_with_done(http):
    body = {
        "model": "ominix-tiny-qwen3",
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
        "stream_options": {"include_usage": True},
    }
    r = await http.post("/v1/chat/completions", json=body)
    lines = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.headers["content-type"].startswith("text/event-stream") and lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == "Hello there" and events[-1]["usage"]["total_tokens"] == 5


async def test_streamed_text_events_are_the_chunks_pydantic_would_frame(slots, http):
    """The per-token events are framed from a template (protocol.sse.SSEFrame): each must be
    byte for byte what building and dumping the ChatCompletionChunk gives, for any text."""
    from deployments.protocol.openai import ChatChunkChoice, ChatCompletionChunk, DeltaMessage
    from deployments.protocol.sse import sse_data

    slots["llm"].answers["chat"] = fakes.generation('He said "héllo"\n\t</s> \\ 日本 \u2028 end')
    r = await http.post("/v1/chat/completions", json={"stream": True, "messages": [{"role": "user", "content": "x"}]})
    events = [e + b"\n\n" for e in r.content.split(b"\n\n") if e]
    first = json.loads(events[0][6:])
    texts = [json.loads(e[6:])["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert "".join(texts) == 'He said "héllo"\n\t</s> \\ 日本 \u2028 end' and len(texts) == 7
    for event, text in zip(events[1:-2], texts):
        choice = ChatChunkChoice(delta=DeltaMessage(content=text))
        expected = ChatCompletionChunk(id=first["id"], created=first["created"], model=first["model"], choices=[choice])
        assert event == sse_data(expected)
    assert json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "stop" and events[-1] == b"data: [DONE]\n\n"


async def test_an_error_mid_stream_becomes_an_error_event(slots, http):
    failing = fakes.generation()
    slots["llm"].answers["chat"] = lambda request, model=None: [failing(request)[0], RuntimeError("engine died")]
    body = {"stream": True, "messages": [{"role": "user", "content": "hi"}]}
    r = await http.post("/v1/chat/completions", json=body)
    lines = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert r.status_code == 200 and lines[-1] == "[DONE]"
    assert json.loads(lines[-2])["error"]["type"] == "server_error"


async def test_an_error_before_the_first_chunk_keeps_its_status(slots, http):
    from deployments.protocol.errors import invalid_request

    slots["llm"].answers["chat"] = lambda request, model=None: [invalid_request("prompt too long", "messages")]
    r = await http.post("/v1/chat/completions", json={"stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert slots["llm"].streams[0].cancelled


async def test_a_named_model_reaches_the_slot_as_its_multiplexed_id(http, slots):
    r = await http.post("/v1/completions", json={"model": "ominix-tiny-qwen3", "prompt": "Once"})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == "Hello there"
    assert slots["llm"].calls[0][0] == "completions" and slots["llm"].calls[0][2] == "ominix-tiny-qwen3"


async def test_unknown_model_is_a_404_before_any_slot_is_called(http, slots):
    r = await http.post(
        "/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert not slots["llm"].calls


async def test_speech_streams_wav_from_the_slot(http):
    r = await http.post("/v1/audio/speech", json={"input": "Hi there.", "response_format": "wav"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    assert r.headers["x-audio-sample-rate"] == str(fakes.SAMPLE_RATE)


async def test_transcription_renders_the_slot_transcript(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={"response_format": "verbose_json"}
    )
    assert r.status_code == 200 and r.json()["text"] == "hello world"
    assert r.json()["segments"][0]["end"] == 1.0 and slots["asr"].calls[0][0] == "transcribe"


def _app_without(*disabled: str):
    args = shipped_args(**{name: {"enabled": False} for name in disabled})
    return create_app(ingress_state(GraphArgs.from_args(args, environ={}), default_slots()))


async def test_every_route_of_a_disabled_slot_answers_the_same():
    import httpx

    app = _app_without("tts", "image", "asr", "llm")
    requests = [
        ("POST", "/v1/chat/completions", {"json": {"messages": [{"role": "user", "content": "hi"}]}}),
        ("POST", "/v1/completions", {"json": {"prompt": "hi"}}),
        ("POST", "/v1/audio/transcriptions", {"files": {"file": ("a.wav", b"x")}}),
        ("POST", "/v1/audio/speech", {"json": {"input": "hi"}}),
        ("POST", "/v1/audio/speech/clone", {"data": {"input": "hi"}, "files": {"reference_audio": ("r.wav", b"x")}}),
        ("POST", "/dev/captioned_speech", {"json": {"input": "hi"}}),
        ("GET", "/v1/voices", {}),
        ("GET", "/v1/audio/voices", {}),
        ("GET", "/v1/audio/models", {}),
        ("POST", "/v1/voices", {"data": {"name": "v"}, "files": {"reference_audio": ("r.wav", b"x")}}),
        ("DELETE", "/v1/voices/v", {}),
        ("POST", "/v1/images/generations", {"json": {"prompt": "a cat"}}),
        ("POST", "/v1/models/quantize", {"json": {"model_id": "flux", "bits": 8}}),
    ]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        for method, path, kwargs in requests:
            r = await http.request(method, path, **kwargs)
            assert r.status_code == 404 and r.json()["error"]["code"] == "slot_disabled", (path, r.text)


def test_the_websocket_of_a_disabled_tts_slot_says_so_and_closes():
    from starlette.testclient import TestClient

    with TestClient(_app_without("tts")).websocket_connect("/ws/v1/tts") as ws:
        assert ws.receive_json() == {"event": "connected_success"}
        error = ws.receive_json()
        assert error["event"] == "error" and "not enabled" in error["message"]


async def test_images_are_returned_as_base64_with_their_seeds(http, slots):
    import base64

    from deployments.protocol.images import GeneratedImages

    def generate(params, model=None):
        return GeneratedImages(
            model="ominix-tiny-flux2-klein",
            images=[b"\x89PNG-a", b"\x89PNG-b"],
            seeds=[params.seed, params.seed + 1],
            output_format="png",
        )

    slots["image"].answers["generate"] = generate
    r = await http.post("/v1/images/generations", json={"prompt": "a red cube", "n": 2, "size": "64x64", "seed": 7})
    body = r.json()
    assert r.status_code == 200, body
    assert [d["seed"] for d in body["data"]] == [7, 8] and base64.b64decode(body["data"][1]["b64_json"]) == b"\x89PNG-b"
    assert body["size"] == "64x64" and body["model"] == "ominix-tiny-flux2-klein"


async def test_a_conversation_keeps_one_routing_key_across_turns(http, slots):
    system = {"role": "system", "content": "You are terse."}
    first = [system, {"role": "user", "content": "Hi"}]
    second = [*first, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "More"}]
    for messages in (first, second):
        await http.post("/v1/chat/completions", json={"messages": messages})
    await http.post("/v1/chat/completions", json={"messages": first, "prompt_cache_key": "conv-7"})
    await http.post("/v1/chat/completions", json={"messages": first}, headers={"x-session-id": "tab-3"})
    keys = slots["llm"].sessions
    assert keys[0] == keys[1] and len(set(keys)) == 3 and all(keys)
