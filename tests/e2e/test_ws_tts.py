"""End to end: the WebSocket TTS protocol (/ws/v1/tts) with a real `websockets` client,
including per-message voice switching and every error event. Sessions name the tiny
pocket_tts model (deterministic and fast: WebSocket audio is compared with HTTP audio); the
slot's default, Kokoro, speaks over the WebSocket in tests/e2e/test_kokoro_api.py and in the
session below that sends no task_start."""

from __future__ import annotations

import json

import httpx
import pytest
import websockets

from deployments.tts.tiny_model import TINY_TTS_ID

TEXT = "Hello world. This is a test of the speech server! It streams sentence by sentence."


@pytest.fixture
def ws_url(server):
    return server.replace("http://", "ws://") + "/ws/v1/tts"


async def recv(ws) -> dict:
    return json.loads(await ws.recv())


async def send(ws, payload) -> None:
    await ws.send(payload if isinstance(payload, str) else json.dumps(payload))


async def synthesize(ws, text: str, **extra) -> tuple[list[bytes], dict]:
    """Send task_continue; collect audio chunks up to the final frame."""
    await send(ws, {"event": "task_continue", "text": text, **extra})
    chunks = []
    while True:
        msg = await recv(ws)
        assert msg["event"] == "task_progress", msg
        if msg["is_final"]:
            assert msg["data"]["audio"] == ""
            return chunks, msg
        chunks.append(bytes.fromhex(msg["data"]["audio"]))


def http_pcm(server: str, voice: str, text: str = TEXT) -> bytes:
    r = httpx.post(
        f"{server}/v1/audio/speech",
        json={"model": TINY_TTS_ID, "input": text, "voice": voice, "response_format": "pcm"},
        timeout=60,
    )
    assert r.status_code == 200
    return r.content


async def start(ws, **settings) -> dict:
    await send(ws, {"event": "task_start", "model": TINY_TTS_ID, **settings})
    return await recv(ws)


async def test_full_session_with_voice_switching(ws_url, server):
    async with websockets.connect(ws_url) as ws:
        assert await recv(ws) == {"event": "connected_success"}
        started = await start(ws, voice_setting={"voice_id": "alba", "speed": 1.0}, audio_setting={"format": "pcm"})
        assert started["event"] == "task_started"
        assert started["sample_rate"] == 24000 and started["format"] == "pcm"

        chunks, _ = await synthesize(ws, TEXT)
        assert len(chunks) > 1  # streamed as generated
        assert b"".join(chunks) == http_pcm(server, "alba")

        switched, _ = await synthesize(ws, TEXT, voice_id="marius")  # per-message override
        assert b"".join(switched) == http_pcm(server, "marius")
        again, _ = await synthesize(ws, TEXT)  # back to the session voice
        assert b"".join(again) == http_pcm(server, "alba")

        await send(ws, {"event": "task_finish"})
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
    assert ws.close_code == 1000


async def test_wav_framing_puts_a_header_on_each_text(ws_url, server):
    async with websockets.connect(ws_url) as ws:
        await recv(ws)
        assert (await start(ws, voice_setting={"voice_id": "marius"}, audio_setting={"format": "wav"}))[
            "format"
        ] == "wav"
        for _ in range(2):
            chunks, _ = await synthesize(ws, TEXT)
            assert chunks[0][:4] == b"RIFF" and all(c[:4] != b"RIFF" for c in chunks[1:])
            assert b"".join(chunks)[44:] == http_pcm(server, "marius")


async def test_task_start_is_optional_and_empty_text_is_final_only(ws_url):
    """No task_start: the slot's default model (Kokoro) and its default voice."""
    async with websockets.connect(ws_url) as ws:
        await recv(ws)
        chunks, _ = await synthesize(ws, "*** ###")
        assert chunks == []
        chunks, _ = await synthesize(ws, "Short and sweet, said the voice.")
        assert chunks


@pytest.mark.parametrize(
    "message,expected",
    [
        ("{not json", "Invalid JSON"),
        ({"text": "hi"}, "Missing 'event' field"),
        ({"event": 42}, "Missing 'event' field"),
        ({"event": "task_continue"}, "Missing 'text' field"),
        ({"event": "task_continue", "text": 5}, "Missing 'text' field"),
        ({"event": "dance"}, "Unknown event: dance"),
        (
            {"event": "task_continue", "text": "hi there", "voice_id": "nobody"},
            "TTS error: Voice 'nobody' is not available",
        ),
        ({"event": "task_continue", "text": "x" * 4097}, "Text too long: 4097 characters (maximum 4096)"),
        ({"event": "task_start", "audio_setting": {"format": "aac"}}, "Unsupported audio format: aac"),
        ({"event": "task_start", "voice_setting": {"speed": 9}}, "voice_setting.speed must be"),
        ({"event": "task_start", "model": "nope"}, "TTS error: The model 'nope' does not exist"),
    ],
)
async def test_error_events_keep_the_session(ws_url, message, expected):
    async with websockets.connect(ws_url) as ws:
        await recv(ws)
        await send(ws, message)
        error = await recv(ws)
        assert error["event"] == "error"
        assert error["message"].startswith(expected), error
        # The session goes on: a good request still works.
        await send(ws, {"event": "task_start", "model": TINY_TTS_ID, "voice_setting": {"voice_id": "alba"}})
        assert (await recv(ws))["event"] == "task_started"
        chunks, _ = await synthesize(ws, TEXT)
        assert chunks


async def test_speed_the_model_cannot_honour_is_an_error_event(ws_url):
    async with websockets.connect(ws_url) as ws:
        await recv(ws)
        await start(ws, voice_setting={"voice_id": "alba", "speed": 1.5})
        await send(ws, {"event": "task_continue", "text": TEXT})
        error = await recv(ws)
        assert error["event"] == "error" and "does not support 'speed'" in error["message"]
