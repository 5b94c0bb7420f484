"""The speech route's audio bytes leave as the slot makes the audio (`audio_response`,
deployments/ingress/serving/speech.py): pcm, wav, mp3, aac and opus a chunk at a time, flac whole;
OpenAI's SSE carries the response format, MiniInfer's PCM only; the WebSocket TTS session
(tts_sessions.py) speaks MiniMax T2A's mp3 and flac too."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shutil
import subprocess

import numpy as np
import pytest
import soundfile as sf
from fastapi.responses import StreamingResponse

from deployments.ingress.serving import speech as serving_speech
from deployments.ingress.serving.speech import audio_response

RATE = 24000


class SlowSpeech:
    """A SpeechStream's `audio()`: three 0.3 s chunks, each logged as it is made."""

    sample_rate = RATE

    def __init__(self, log: list):
        self.log = log

    async def audio(self):
        for i in range(3):
            await asyncio.sleep(0.01)
            self.log.append(("made", i))
            t = np.arange(i * 7200, (i + 1) * 7200) / RATE
            yield (0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)


needs_ffmpeg = pytest.mark.skipif(not shutil.which("ffmpeg"), reason="ffmpeg is not installed")


def decode(body: bytes, fmt: str) -> tuple[np.ndarray, int]:
    if fmt != "aac":
        return sf.read(io.BytesIO(body), dtype="float32")
    cmd = ["ffmpeg", "-loglevel", "error", "-i", "pipe:0", "-f", "f32le", "-ac", "1", "-ar", str(RATE), "pipe:1"]
    return np.frombuffer(subprocess.run(cmd, input=body, capture_output=True, check=True).stdout, np.float32), RATE


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus", pytest.param("aac", marks=needs_ffmpeg)])
async def test_each_chunk_is_sent_before_the_next_is_made(fmt):
    log: list = []
    response = await audio_response(SlowSpeech(log), fmt)
    assert isinstance(response, StreamingResponse) and response.headers["x-audio-sample-rate"] == str(RATE)
    body = b""
    async for part in response.body_iterator:
        if part:
            log.append(("sent", len(part)))
            body += part
    made = [i for i, (what, _) in enumerate(log) if what == "made"]
    # bytes go out between the chunks, not all after the last one
    assert all(log[i + 1][0] == "sent" for i in made), log
    if fmt != "pcm":
        decoded, rate = decode(body, fmt)
        assert rate == RATE and abs(decoded.size - 3 * 7200) < 0.1 * RATE


@needs_ffmpeg
async def test_a_listener_leaving_an_aac_stream_stops_its_encoder(monkeypatch):
    encoders = []

    class Recorded(serving_speech.StreamEncoder):
        def __init__(self, *args):
            super().__init__(*args)
            encoders.append(self)

    monkeypatch.setattr(serving_speech, "StreamEncoder", Recorded)
    response = await audio_response(SlowSpeech([]), "aac")
    async for part in response.body_iterator:
        if part:
            break
    await response.body_iterator.aclose()  # what Starlette does when the client disconnects
    assert encoders[0]._encoded._process.poll() is not None


async def test_flac_is_encoded_whole():
    log: list = []
    response = await audio_response(SlowSpeech(log), "flac")
    assert not isinstance(response, StreamingResponse)
    assert [what for what, _ in log] == ["made"] * 3
    assert sf.info(io.BytesIO(response.body)).frames == 3 * 7200


def sse_events(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


@pytest.mark.parametrize("fmt", ["mp3", "wav", None])
async def test_openai_sse_carries_the_response_format(http, fmt):
    body = {"input": "Hello there.", "stream_format": "sse", **({"response_format": fmt} if fmt else {})}
    r = await http.post("/v1/audio/speech", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1]["type"] == "speech.audio.done" and {e["type"] for e in events[:-1]} == {"speech.audio.delta"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    seconds = events[-1]["audio_seconds"]
    if fmt is None:  # PCM unless a format is named
        assert len(audio) == 2 * round(seconds * RATE) > 0
        return
    decoded, rate = sf.read(io.BytesIO(audio), dtype="float32")
    assert rate == RATE and abs(decoded.size / RATE - seconds) < 0.1 and seconds > 0


async def test_miniinfer_sse_is_pcm_only(http):
    r = await http.post("/v1/audio/speech", json={"input": "Hello.", "stream": True, "response_format": "mp3"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format"


@pytest.mark.parametrize("fmt", ["mp3", "flac"])
def test_the_websocket_speaks_minimax_formats(app, fmt):
    """MiniMax T2A's clients ask for mp3 by default; each text's progress frames join into one file."""
    from starlette.testclient import TestClient

    with TestClient(app).websocket_connect("/ws/v1/tts") as ws:
        assert ws.receive_json() == {"event": "connected_success"}
        ws.send_json({"event": "task_start", "audio_setting": {"format": fmt}})
        assert ws.receive_json()["format"] == fmt
        for _ in range(2):  # every text its own file
            ws.send_json({"event": "task_continue", "text": "Hello there."})
            frames = []
            while not (frame := ws.receive_json())["is_final"]:
                frames.append(bytes.fromhex(frame["data"]["audio"]))
            assert frames and all(frames)
            decoded, rate = sf.read(io.BytesIO(b"".join(frames)), dtype="float32")
            assert rate == RATE and abs(decoded.size - 0.1 * RATE) < 0.1 * RATE
