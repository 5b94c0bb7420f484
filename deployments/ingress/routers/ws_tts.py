"""WebSocket TTS, /ws/v1/tts: OminiX-API's MiniMax-T2A-style protocol.

connect -> {"event": "connected_success"}
task_start {voice_setting: {voice_id, speed, language}, audio_setting: {format}, model?}
    -> {"event": "task_started", "sample_rate", "channels", "bits_per_sample", "format"}
task_continue {text, voice_id?} -> task_progress {"data": {"audio": "<hex>"}, "is_final": false}
    per audio chunk as it is generated, then one with "audio": "" and "is_final": true
task_finish -> the server closes the connection.

Audio framing: `pcm` (the default, what OminiX-API sends): raw PCM16 LE mono at the model's
rate. `wav`: the same, but the first chunk of each text starts with a 44-byte streaming WAV
header (sizes 0xFFFFFFFF), so each text is one WAV stream. Errors are
`{"event": "error", "message"}` events that leave the session open. Texts are processed one
after the other. A session silent for the idle timeout is told so and closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Optional

from fastapi import APIRouter, Depends, WebSocket, WebSocketDisconnect

from deployments.audio.encode import StreamEncoder
from deployments.ingress.errors import from_exception
from deployments.ingress.speech import SpeechStream
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.speech import SynthesisParams

logger = logging.getLogger("ray.serve")
router = APIRouter(tags=["audio"])

WS_FORMATS = ("pcm", "wav")
MIN_SPEED, MAX_SPEED = 0.25, 4.0


class SessionError(Exception):
    """Reported to the client as an error event; the session goes on."""


class ClientGone(Exception):
    """Sending to the client failed: the session ends without further messages."""


@dataclass
class Session:
    voice: Optional[str] = None
    speed: float = 1.0
    language: Optional[str] = None
    format: str = "pcm"
    model: Optional[str] = None

    def start(self, message: dict[str, Any]) -> None:
        """Apply a task_start. As OminiX-API: a voice_setting without voice_id clears the voice.
        A field of the wrong type is an error, never silently dropped."""
        voice_setting = _object(message, "voice_setting")
        if voice_setting is not None:
            voice = _string(voice_setting, "voice_id", "voice_setting.voice_id")
            speed = voice_setting.get("speed", 1.0)
            if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not MIN_SPEED <= speed <= MAX_SPEED:
                raise SessionError(f"voice_setting.speed must be a number in [{MIN_SPEED}, {MAX_SPEED}]")
            language = _string(voice_setting, "language", "voice_setting.language")
            self.voice = voice or None
            self.speed = float(speed)
            self.language = language or self.language
        audio_setting = _object(message, "audio_setting")
        if audio_setting is not None and "format" in audio_setting:
            fmt = str(audio_setting["format"]).lower()
            if fmt not in WS_FORMATS:
                raise SessionError(f"Unsupported audio format: {fmt} (use {' or '.join(WS_FORMATS)})")
            self.format = fmt
        model = _string(message, "model", "model")
        if model:
            self.model = model


def _object(message: dict[str, Any], field: str) -> Optional[dict[str, Any]]:
    value = message.get(field)
    if value is not None and not isinstance(value, dict):
        raise SessionError(f"'{field}' must be an object")
    return value


def _string(message: dict[str, Any], field: str, name: str) -> Optional[str]:
    value = message.get(field)
    if value is not None and not isinstance(value, str):
        raise SessionError(f"'{name}' must be a string")
    return value


@router.websocket("/ws/v1/tts")
async def ws_tts(websocket: WebSocket, state: IngressState = Depends(ingress_state)):
    await websocket.accept()
    try:
        await _send(websocket, {"event": "connected_success"})
        await _serve_session(websocket, state)
    except (WebSocketDisconnect, ClientGone):
        return
    try:
        await websocket.close()
    except RuntimeError:
        pass  # already closed


async def _serve_session(websocket: WebSocket, state: IngressState) -> None:
    session = Session()
    try:
        facts = await _describe(state, session)
    except SessionError as e:  # nothing to synthesize with: say why and close
        await _error(websocket, str(e))
        return
    while True:
        try:
            raw = await asyncio.wait_for(websocket.receive(), timeout=facts["ws_idle_timeout_s"])
        except TimeoutError:
            await _error(websocket, f"Idle timeout: no message for {facts['ws_idle_timeout_s']:g} s, closing")
            return
        if raw["type"] == "websocket.disconnect":
            return
        if raw.get("text") is None:
            # OminiX-API drops binary frames silently; a client that sends one has a bug: say so.
            await _error(websocket, "Binary frames are not supported: send JSON text frames")
            continue
        try:
            message = json.loads(raw["text"])
        except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
            await _error(websocket, "Invalid JSON")
            continue
        event = message.get("event") if isinstance(message, dict) else None
        if not isinstance(event, str):
            await _error(websocket, "Missing 'event' field")
            continue
        try:
            if event == "task_start":  # all or nothing: a rejected task_start changes nothing
                candidate = replace(session)
                candidate.start(message)
                facts = await _describe(state, candidate)
                session = candidate
                await _send(
                    websocket,
                    {
                        "event": "task_started",
                        "sample_rate": facts["sample_rate"],
                        "channels": 1,
                        "bits_per_sample": 16,
                        "format": session.format,
                    },
                )
            elif event == "task_continue":
                await _synthesize(websocket, state, session, message, facts["max_input_chars"])
            elif event == "task_finish":
                return
            else:
                raise SessionError(f"Unknown event: {event}")
        except SessionError as e:
            await _error(websocket, str(e))


async def _describe(state: IngressState, session: Session) -> dict[str, Any]:
    try:
        tts = state.slot("tts")
        model = state.catalog.resolve("tts", session.model)
        return await tts.call("describe", model=model)
    except Exception as e:
        raise SessionError(f"TTS error: {from_exception(e).message}") from None


async def _synthesize(
    websocket: WebSocket, state: IngressState, session: Session, message: dict[str, Any], max_chars: int
) -> None:
    text = message.get("text")
    if not isinstance(text, str):
        raise SessionError("Missing 'text' field")
    if len(text) > max_chars:
        raise SessionError(f"Text too long: {len(text)} characters (maximum {max_chars})")
    voice = _string(message, "voice_id", "voice_id") or session.voice
    params = SynthesisParams(text=text, voice=voice, speed=session.speed, language=session.language)
    try:
        model = state.catalog.resolve("tts", session.model)
        speech = await SpeechStream.open(state, params, model)
        encoder = StreamEncoder(session.format, speech.sample_rate)
        async for samples in speech.audio():
            await _progress(websocket, encoder.feed(samples), False)
    except (ClientGone, WebSocketDisconnect):
        raise
    except Exception as e:
        raise SessionError(f"TTS error: {from_exception(e).message}") from None
    # A text with no audio still gets a WAV header in wav mode; then the final marker.
    tail = encoder.finish()
    if tail:
        await _progress(websocket, tail, False)
    await _progress(websocket, b"", True)


async def _progress(websocket: WebSocket, audio: bytes, is_final: bool) -> None:
    await _send(websocket, {"event": "task_progress", "data": {"audio": audio.hex()}, "is_final": is_final})


async def _error(websocket: WebSocket, message: str) -> None:
    await _send(websocket, {"event": "error", "message": message})


async def _send(websocket: WebSocket, payload: dict[str, Any]) -> None:
    try:
        await websocket.send_json(payload)
    except Exception as e:  # the client went away mid-stream: stop synthesizing for it
        raise ClientGone(str(e)) from None
