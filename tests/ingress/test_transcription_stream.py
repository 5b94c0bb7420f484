"""`stream=true` on /v1/audio/transcriptions in its three forms, and /v1/audio/translations, in
process (fake ASR slot): the SSE framing, which slot call each form makes, and the 400s."""

from __future__ import annotations

import json

import pytest

from deployments.protocol.errors import invalid_request
from tests.assertions import assert_openai_error
from tests.ingress.fakes import FakeClient, transcript

EVENTS = [
    {"type": "transcript.text.delta", "delta": "Hello"},
    {"type": "transcript.text.delta", "delta": " world"},
    {"type": "transcript.text.done", "text": "Hello world", "usage": {"type": "duration", "seconds": 1.0}},
]


@pytest.fixture
def slots(slots):
    slots["asr"] = FakeClient(
        transcribe=transcript(),
        transcribe_stream=lambda params, audio, server_path, references=None, model=None: EVENTS,
    )
    return slots


def events(r) -> list[dict]:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in r.text
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


async def test_stream_true_in_every_form(http, slots):
    form = await http.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", b"RIFF")},
        data={"stream": "true", "model": "whisper-tiny.en"},
    )
    raw = await http.post("/v1/audio/transcriptions?stream=true", content=b"RIFF")
    body = await http.post("/v1/audio/transcriptions", json={"file": "UklGRg==", "stream": True})
    for r in (form, raw, body):
        assert events(r) == EVENTS
    calls = slots["asr"].calls
    assert [c[0] for c in calls] == ["transcribe_stream"] * 3
    assert all(c[1][0].stream and c[1][0].task == "transcribe" for c in calls)
    assert calls[0][2] == "whisper-tiny.en" and calls[1][1][1] == b"RIFF"


async def test_stream_false_is_the_usual_json(http, slots):
    r = await http.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF")}, data={"stream": "false"})
    assert r.json() == {"text": "hello world"} and slots["asr"].calls[0][0] == "transcribe"


async def test_stream_needs_a_text_format(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", b"RIFF")},
        data={"stream": "true", "response_format": "srt"},
    )
    assert "json, text, diarized_json" in assert_openai_error(r, 400, param="stream")["message"]
    assert_openai_error(await http.post("/v1/audio/transcriptions?stream=maybe", content=b"RIFF"), 400, param="stream")
    assert slots["asr"].calls == []


async def test_an_error_before_the_first_event_keeps_its_status(http, slots):
    def bad(params, audio, server_path, references=None, model=None):
        raise invalid_request("The audio could not be decoded", "file", "invalid_audio")

    slots["asr"].answers["transcribe_stream"] = bad
    r = await http.post("/v1/audio/transcriptions?stream=true", content=b"junk")
    assert_openai_error(r, 400, param="file", code="invalid_audio")


async def test_translations_ask_the_slot_to_translate(http, slots):
    r = await http.post("/v1/audio/translations", files={"file": ("a.wav", b"RIFF")}, data={"model": "whisper-tiny.en"})
    assert r.json() == {"text": "hello world"}
    method, (params, *_), model = slots["asr"].calls[0]
    assert method == "transcribe" and params.task == "translate" and model == "whisper-tiny.en"
    # A client cannot turn a transcription into a translation through the JSON body.
    await http.post("/v1/audio/transcriptions", json={"file": "UklGRg==", "task": "translate"})
    assert slots["asr"].calls[1][1][0].task == "transcribe"
