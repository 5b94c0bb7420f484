"""End to end: the built-in real TTS model Kokoro-82M on the session graph. Its speech is
transcribed back by the graph's ASR slot (real Whisper tiny.en) and must say what was asked
(WER <= 0.1), over HTTP and over the WebSocket; options it cannot honour are 400s."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import soundfile as sf
import websockets

from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID
from deployments.tts.kokoro import KOKORO_TTS_ID
from deployments.tts.tiny_model import TINY_TTS_ID
from tests.speech import encode, word_error_rate

pytestmark = pytest.mark.slow

SENTENCE = "Please schedule the meeting for Tuesday afternoon. The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module", autouse=True)
def kokoro_loaded(http):
    """The first request converts Kokoro into the session's fresh cache and loads it (the
    conversion takes tens of seconds on a busy 2-core machine); later requests only synthesize."""
    r = http.post(
        "/v1/audio/speech", json={"model": KOKORO_TTS_ID, "input": "Hello.", "response_format": "pcm"}, timeout=600
    )
    assert r.status_code == 200, r.text


def transcribe(client, samples: np.ndarray, rate: int) -> str:
    result = client.audio.transcriptions.create(
        model=WHISPER_TINY_EN_ID,
        file=("speech.wav", encode(samples, rate, "wav")),
        language="en",
    )
    return result.text


@pytest.mark.parametrize("voice", ["am_michael", "bf_emma"])
def test_speech_round_trip_through_the_graph(client, voice):
    audio = client.audio.speech.create(model=KOKORO_TTS_ID, voice=voice, input=SENTENCE, response_format="wav")
    samples, rate = sf.read(io.BytesIO(audio.content), dtype="float32")
    assert rate == 24000 and 3.0 < len(samples) / rate < 15.0
    text = transcribe(client, samples, rate)
    assert word_error_rate(SENTENCE, text) <= 0.1, text


def test_pcm_streams_sentence_by_sentence(http):
    with http.stream(
        "POST",
        "/v1/audio/speech",
        json={
            "model": KOKORO_TTS_ID,
            "voice": "af_heart",
            "input": SENTENCE,
            "response_format": "pcm",
        },
    ) as r:
        assert r.status_code == 200 and r.headers["x-audio-sample-rate"] == "24000"
        chunks = [c for c in r.iter_raw() if c]
    assert len(chunks) >= 2  # the first sentence is sent before the second is synthesized


def test_reference_audio_is_a_400_that_names_a_model_that_clones(http):
    tone = (0.3 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 220)).astype(np.float32)
    r = http.post(
        "/v1/audio/speech",
        json={
            "model": KOKORO_TTS_ID,
            "input": "Hello.",
            "reference_audio": base64.b64encode(encode(tone, 16000, "wav")).decode(),
        },
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "reference_audio" and TINY_TTS_ID in error["message"]


def test_a_language_kokoro_does_not_speak_is_a_400(http):
    r = http.post("/v1/audio/speech", json={"model": KOKORO_TTS_ID, "input": "Hello.", "language": "tlh"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "language", r.text


async def test_websocket_speaks_with_kokoro_voices(server, client):
    url = server.replace("http://", "ws://") + "/ws/v1/tts"
    async with websockets.connect(url) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        await ws.send(
            json.dumps(
                {
                    "event": "task_start",
                    "model": KOKORO_TTS_ID,
                    "voice_setting": {"voice_id": "bf_emma"},
                    "audio_setting": {"format": "pcm"},
                }
            )
        )
        started = json.loads(await ws.recv())
        assert started["event"] == "task_started" and started["sample_rate"] == 24000, started
        await ws.send(json.dumps({"event": "task_continue", "text": SENTENCE}))
        pcm = b""
        while not (msg := json.loads(await ws.recv()))["is_final"]:
            pcm += bytes.fromhex(msg["data"]["audio"])
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    text = transcribe(client, samples, 24000)
    assert word_error_rate(SENTENCE, text) <= 0.1, text
