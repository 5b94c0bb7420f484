"""The review of OpenAI's embeddings, transcription and speech requests at the ingress: fields
not served are a 400 naming them before any slot call, OpenAI's other forms are served, and the
audio routes that read their own bodies describe them in /openapi.json."""

from __future__ import annotations

import pytest

from tests.assertions import assert_openai_error


async def test_the_audio_routes_describe_their_bodies_in_the_schema(http):
    paths = (await http.get("/openapi.json")).json()["paths"]
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/audio/diarization"):
        content = paths[path]["post"]["requestBody"]["content"]
        form = content["multipart/form-data"]["schema"]
        assert form["required"] == ["file"] and form["properties"]["file"]["format"] == "binary", path
        assert "application/octet-stream" in content
    form = paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert "diarized_json" in form["properties"]["response_format"]["enum"]
    assert form["properties"]["timestamp_granularities[]"]["type"] == "array"
    assert "application/json" in paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    diarize = paths["/v1/audio/diarization"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert diarize["properties"]["response_format"]["enum"] == ["json", "rttm"]


async def test_token_ids_are_integers_never_booleans(http, slots):
    for body in ({"input": [True, 2]}, {"input": [[1], [False]]}):
        error = assert_openai_error(await http.post("/v1/embeddings", json=body), 400)
        assert error["param"].startswith("input")
    assert not slots["embeddings"].calls


@pytest.mark.parametrize("field", ["keywords", "languages"])
async def test_transcription_fields_not_served_are_a_400_naming_them(http, slots, field):
    form = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={f"{field}[]": "logprobs"}
    )
    assert field in assert_openai_error(form, 400, field)["message"]
    as_json = await http.post("/v1/audio/transcriptions", json={"file": "UklGRg==", field: ["en"]})
    assert_openai_error(as_json, 400, field)
    assert not slots["asr"].calls


async def test_logprobs_are_asked_of_the_slot_in_json_and_refused_elsewhere(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={"include[]": "logprobs"}
    )
    assert r.status_code == 200 and r.json()["logprobs"] == [], r.text  # the fake slot's transcript has none
    assert slots["asr"].calls[-1][1][0].logprobs
    plain = await http.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")})
    assert "logprobs" not in plain.json() and not slots["asr"].calls[-1][1][0].logprobs
    calls = len(slots["asr"].calls)
    wrong_format = {"include[]": "logprobs", "response_format": "verbose_json"}
    r = await http.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data=wrong_format)
    assert "json" in assert_openai_error(r, 400, "include")["message"]
    r = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={"include[]": "tokens"}
    )
    assert assert_openai_error(r, 400)["param"].startswith("include")
    assert len(slots["asr"].calls) == calls


async def test_a_chunking_strategy_is_accepted_and_meaningless_here(http, slots):
    r = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={"chunking_strategy": "auto"}
    )
    assert r.status_code == 200, r.text
    assert slots["asr"].calls


async def test_a_custom_voice_by_id_names_the_voice(http, slots):
    r = await http.post("/v1/audio/speech", json={"input": "hi", "voice": {"id": "alba"}, "response_format": "pcm"})
    assert r.status_code == 200, r.text
    assert slots["tts"].calls[-1][1][0].voice == "alba"
