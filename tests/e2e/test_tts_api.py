"""End to end: POST /v1/audio/speech (+ clone) on the shipped graph's TTS slot, through the
openai SDK and raw httpx. Every request names the built-in tiny pocket_tts model (the slot's
default is Kokoro, tests/e2e/test_kokoro_api.py): it decodes greedily and fast, so the same
text and voice give the same samples: tests compare audio across routes and voices."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from deployments.audio.decode import decode_audio
from deployments.audio.encode import encode_wav
from deployments.tts.kokoro import KOKORO_TTS_ID
from deployments.tts.tiny_model import TINY_TTS_ID, TINY_TTS_VOICES

TEXT = "Hello world. This is a test of the speech server! It streams sentence by sentence."
RATE = 24000
TINY = {"model": TINY_TTS_ID}


def tone_wav(freq: float, seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A reference recording: a sine (at another rate than the model's, to exercise resampling)."""
    t = np.arange(int(seconds * rate)) / rate
    return encode_wav((0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


def pcm_of(http: httpx.Client, **body) -> bytes:
    r = http.post("/v1/audio/speech", json={**TINY, "input": TEXT, "response_format": "pcm", **body})
    assert r.status_code == 200, r.text
    return r.content


def assert_error(r: httpx.Response, status: int, code: str | None = None, param: str | None = None):
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["message"]
    if code:
        assert error["code"] == code
    if param:
        assert error["param"] == param
    return error


def test_openai_sdk_wav(client):
    audio = client.audio.speech.create(model=TINY_TTS_ID, voice="alba", input=TEXT, response_format="wav")
    samples, rate = sf.read(io.BytesIO(audio.content), dtype="float32")
    assert rate == RATE
    assert samples.size > RATE // 10


def test_default_format_is_wav(http):
    r = http.post("/v1/audio/speech", json={**TINY, "input": TEXT})
    assert r.status_code == 200
    assert r.headers["content-type"] == "audio/wav"
    assert r.content[:4] == b"RIFF"


@pytest.mark.parametrize("fmt,media", [("mp3", "audio/mpeg"), ("flac", "audio/flac"), ("opus", "audio/ogg")])
def test_compressed_formats_decode(client, fmt, media):
    response = client.audio.speech.with_raw_response.create(
        model=TINY_TTS_ID, voice="marius", input=TEXT, response_format=fmt
    )
    assert response.headers["content-type"] == media
    samples, _ = sf.read(io.BytesIO(response.content))
    assert samples.size > 0


def test_aac_streams_the_whole_speech_or_needs_ffmpeg(http):
    r = http.post("/v1/audio/speech", json={**TINY, "input": TEXT, "response_format": "aac"})
    if shutil.which("ffmpeg"):
        assert r.status_code == 200 and r.headers["content-type"] == "audio/aac"
        assert r.content[:2] == b"\xff\xf1"  # ADTS sync word
        # OpenAI's SSE: the ADTS stream in deltas, and how long the speech was; they agree
        body = {**TINY, "input": TEXT, "response_format": "aac", "stream_format": "sse"}
        events = [
            json.loads(line[6:])
            for line in http.post("/v1/audio/speech", json=body).text.splitlines()
            if line.startswith("data: ")
        ]
        adts = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
        seconds = events[-1]["audio_seconds"]
        assert seconds > 0.3 and abs(decode_audio(adts, 24000).size / 24000 - seconds) < 0.1
    else:
        assert_error(r, 400, "unsupported_format", "response_format")


def test_pcm_streams_in_chunks_with_audio_headers(client):
    with client.audio.speech.with_streaming_response.create(
        model=TINY_TTS_ID, voice="alba", input=TEXT, response_format="pcm"
    ) as response:
        assert response.headers["x-audio-sample-rate"] == str(RATE)
        assert response.headers["x-audio-channels"] == "1"
        assert response.headers["x-audio-bits-per-sample"] == "16"
        assert response.headers["transfer-encoding"] == "chunked"
        chunks = [c for c in response.iter_bytes(None) if c]
    pcm = b"".join(chunks)
    assert len(pcm) % 2 == 0 and len(pcm) > 0
    assert len(chunks) > 1  # streamed as generated, not in one piece


def test_httpx_pcm_chunking_matches_whole(http):
    with http.stream(
        "POST", "/v1/audio/speech", json={**TINY, "input": TEXT, "voice": "alba", "response_format": "pcm"}
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "audio/pcm"
        chunks = [c for c in r.iter_raw() if c]
    assert len(chunks) > 1
    wav = http.post("/v1/audio/speech", json={**TINY, "input": TEXT, "voice": "alba", "response_format": "wav"}).content
    assert b"".join(chunks) == wav[44:]  # same samples, WAV adds the streaming header


def test_query_format_overrides(http):
    r = http.post("/v1/audio/speech?format=wav", json={**TINY, "input": TEXT, "response_format": "pcm"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"


def test_voices_are_distinct_and_deterministic(http):
    alba = pcm_of(http, voice="alba")
    assert pcm_of(http, voice="ALBA") == alba  # case-insensitive
    assert pcm_of(http, voice="marius") != alba


def test_miniinfer_sse(http):
    with http.stream("POST", "/v1/audio/speech", json={**TINY, "input": TEXT, "voice": "alba", "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    deltas = [json.loads(line[6:])["delta"] for line in lines[:-1]]
    assert len(deltas) > 1
    assert b"".join(base64.b64decode(d) for d in deltas) == pcm_of(http, voice="alba")


def test_openai_sse(client, http):
    with client.audio.speech.with_streaming_response.create(
        model=TINY_TTS_ID, voice="alba", input=TEXT, stream_format="sse"
    ) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[-1] == "speech.audio.done" and set(types[:-1]) == {"speech.audio.delta"}
    assert len(types) > 2
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert pcm == pcm_of(http, voice="alba")
    assert events[-1]["audio_seconds"] == pytest.approx(len(pcm) / 2 / RATE)


def test_empty_text_gives_empty_audio(http):
    r = http.post("/v1/audio/speech", json={**TINY, "input": "*** ###", "response_format": "wav"})
    assert r.status_code == 200
    assert r.content[:4] == b"RIFF" and len(r.content) == 44


@pytest.mark.parametrize(
    "body,status,code,param",
    [
        ({}, 400, None, "input"),
        ({"input": "x" * 4097}, 400, "input_too_long", "input"),
        ({"input": "hi", "speed": 5}, 400, None, "speed"),
        ({"input": "hi", "speed": 1.5}, 400, None, "speed"),  # pocket_tts has no speed control
        ({"input": "hi", "instruct": "whisper"}, 400, None, "instruct"),
        ({"input": "hi", "response_format": "xyz"}, 400, None, "response_format"),
        ({"input": "hi", "stream": True, "response_format": "mp3"}, 400, None, "response_format"),
        ({"input": "hi", "reference_audio": "not base64!"}, 400, "invalid_reference_audio", "reference_audio"),
        (
            {"input": "hi", "reference_audio": base64.b64encode(b"RIFFjunk").decode()},
            400,
            "invalid_reference_audio",
            None,
        ),
        ({"input": "hi", "model": "nope"}, 404, "model_not_found", "model"),
        ({"input": "hi", "voice": "nobody"}, 404, "voice_not_found", "voice"),
        ({"input": "hi", "voice": "../../etc/passwd"}, 404, "voice_not_found", "voice"),
        ({"input": "hi", "voice": "/etc/passwd"}, 404, "voice_not_found", "voice"),
    ],
)
def test_bad_requests(http, body, status, code, param):
    assert_error(http.post("/v1/audio/speech", json={**TINY, **body}), status, code, param)


def test_unknown_voice_lists_valid_names(http):
    error = assert_error(http.post("/v1/audio/speech", json={**TINY, "input": "hi", "voice": "nobody"}), 404)
    for name in TINY_TTS_VOICES:
        assert name in error["message"]


def test_clone_from_reference_audio(http):
    low = base64.b64encode(tone_wav(180)).decode()
    high = base64.b64encode(tone_wav(900)).decode()
    a = pcm_of(http, reference_audio=low, reference_text="a low tone")
    assert a == pcm_of(http, reference_audio=low)
    assert a != pcm_of(http, reference_audio=high)
    assert a not in (pcm_of(http, voice=v) for v in TINY_TTS_VOICES)


async def test_concurrent_clones_never_mix_voices(server):
    """OminiX-API caches one reference globally; here each request keeps its own."""
    refs = [base64.b64encode(tone_wav(f)).decode() for f in (150, 400, 1200)]
    async with httpx.AsyncClient(base_url=server, timeout=120) as ac:

        async def synth(ref):
            r = await ac.post(
                "/v1/audio/speech", json={**TINY, "input": TEXT, "response_format": "pcm", "reference_audio": ref}
            )
            assert r.status_code == 200
            return r.content

        alone = [await synth(ref) for ref in refs]
        together = await asyncio.gather(*(synth(ref) for ref in refs * 2))
    assert together == alone * 2
    assert len(set(alone)) == 3


def test_clone_multipart_route(http):
    files = {"reference_audio": ("ref.wav", tone_wav(300), "audio/wav")}
    r = http.post(
        "/v1/audio/speech/clone?format=wav", data={**TINY, "input": TEXT, "reference_text": "tone"}, files=files
    )
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    same = pcm_of(http, reference_audio=base64.b64encode(tone_wav(300)).decode())
    assert r.content[44:] == same
    r = http.post("/v1/audio/speech/clone", data={"input": TEXT})
    assert_error(r, 400, None, "reference_audio")


def test_models_list_has_tts(client):
    cards = {m.id: m for m in client.models.list().data}
    assert TINY_TTS_ID in cards and KOKORO_TTS_ID in cards
    assert "/v1/audio/speech" in cards[TINY_TTS_ID].model_extra["endpoints"]


def test_first_audio_arrives_long_before_the_end(http):
    text = " ".join(["The quick brown fox jumps over the lazy dog, then it runs far away."] * 55)
    t0 = time.perf_counter()
    first = None
    total = 0
    with http.stream(
        "POST", "/v1/audio/speech", json={**TINY, "input": text, "voice": "alba", "response_format": "pcm"}
    ) as r:
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - t0
            total += len(chunk)
    elapsed = time.perf_counter() - t0
    print(
        f"{len(text)} chars: first audio after {first * 1000:.0f} ms, all {total / 2 / RATE:.1f} s of audio after {elapsed * 1000:.0f} ms"
    )
    assert first < elapsed / 3
