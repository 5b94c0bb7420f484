"""The WebSocket TTS session behind /ws/v1/tts (the protocol: ingress/routers/ws_tts.py): its
settings, what each client message does, and the synthesis of each text on the TTS slot.

The router accepts the connection and calls `TTSSession.step` until it answers False; the
session sends every event itself. Errors are error events that leave the session open; a
client that cannot be sent to ends the session (`ClientGone`).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any, Optional

from fastapi import WebSocket, WebSocketDisconnect

from deployments.audio.encode import StreamEncoder
from deployments.ingress.errors import from_exception
from deployments.ingress.serving.speech_stream import SpeechStream, encoder_step
from deployments.ingress.state import IngressState
from deployments.protocol.speech import SynthesisParams

# MiniMax T2A's formats: pcm and wav as OminiX-API frames them, mp3 (MiniMax's default) streamed,
# flac whole at the end of each text (deployments/audio/encode.py).
WS_FORMATS = ("pcm", "wav", "mp3", "flac")
MIN_SPEED, MAX_SPEED = 0.25, 4.0


class SessionError(Exception):
    """Reported to the client as an error event; the session goes on."""


class ClientGone(Exception):
    """Sending to the client failed: the session ends without further messages."""


@dataclass
class SessionSettings:
    """What a task_start sets: the voice, speed, language, audio format and model of the texts after it."""

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
                raise SessionError(f"Unsupported audio format: {fmt} (use {', '.join(WS_FORMATS)})")
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


def _event(frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A received frame's event name and message; anything else is a SessionError."""
    if frame.get("text") is None:
        # OminiX-API drops binary frames silently; a client that sends one has a bug: say so.
        raise SessionError("Binary frames are not supported: send JSON text frames")
    try:
        message = json.loads(frame["text"])
    except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        raise SessionError("Invalid JSON") from None
    event = message.get("event") if isinstance(message, dict) else None
    if not isinstance(event, str):
        raise SessionError("Missing 'event' field")
    return event, message


class TTSSession:
    """One connection's session: its settings and the TTS slot's facts for them (sample rate,
    text limit, idle timeout)."""

    def __init__(self, websocket: WebSocket, state: IngressState):
        self.ws, self.state = websocket, state
        self.settings = SessionSettings()
        self.facts: dict[str, Any] = {}

    async def open(self) -> bool:
        """The facts of the default settings; False, after an error event, when there is
        nothing to synthesize with (the router then closes)."""
        try:
            self.facts = await self._describe(self.settings)
        except SessionError as e:
            await self.error(str(e))
            return False
        return True

    async def step(self) -> bool:
        """Receive one frame and act on it; False when the session is over."""
        idle_s = self.facts["ws_idle_timeout_s"]
        try:
            frame = await asyncio.wait_for(self.ws.receive(), timeout=idle_s)
        except TimeoutError:
            await self.error(f"Idle timeout: no message for {idle_s:g} s, closing")
            return False
        if frame["type"] == "websocket.disconnect":
            return False
        try:
            return await self._handle(*_event(frame))
        except SessionError as e:
            await self.error(str(e))
            return True

    async def _handle(self, event: str, message: dict[str, Any]) -> bool:
        if event == "task_start":
            await self._start(message)
        elif event == "task_continue":
            await self._synthesize(message)
        elif event == "task_finish":
            return False
        else:
            raise SessionError(f"Unknown event: {event}")
        return True

    async def _start(self, message: dict[str, Any]) -> None:
        """All or nothing: a rejected task_start changes nothing."""
        candidate = replace(self.settings)
        candidate.start(message)
        self.facts = await self._describe(candidate)
        self.settings = candidate
        started = {"sample_rate": self.facts["sample_rate"], "channels": 1, "bits_per_sample": 16}
        await self.send({"event": "task_started", **started, "format": candidate.format})

    async def _describe(self, settings: SessionSettings) -> dict[str, Any]:
        try:
            tts = self.state.slot("tts")
            model = self.state.catalog.resolve("tts", settings.model)
            return await tts.call("describe", model=model)
        except Exception as e:
            raise SessionError(f"TTS error: {from_exception(e).message}") from None

    async def _synthesize(self, message: dict[str, Any]) -> None:
        """One text, sent as progress events while it is synthesized, then the final marker."""
        params = self._params(message)
        try:
            model = self.state.catalog.resolve("tts", self.settings.model)
            speech = await SpeechStream.open(self.state, params, model)
            tail = await self._send_audio(speech)
        except (ClientGone, WebSocketDisconnect):
            raise
        except Exception as e:
            raise SessionError(f"TTS error: {from_exception(e).message}") from None
        if tail:
            await self._progress(tail, False)
        await self._progress(b"", True)

    async def _send_audio(self, speech: SpeechStream) -> bytes:
        """Progress events with the audio as it is encoded; the encoder's tail, to send last."""
        with StreamEncoder(self.settings.format, speech.sample_rate) as encoder:  # stopped if the client leaves
            async for samples in speech.audio():
                if audio := await encoder_step(encoder, encoder.feed, samples):
                    await self._progress(audio, False)
            # A text with no audio still gets a WAV header in wav mode; then the final marker.
            return await encoder_step(encoder, encoder.finish)

    def _params(self, message: dict[str, Any]) -> SynthesisParams:
        """A task_continue's text (within the slot's limit) with the session's settings."""
        text, max_chars = message.get("text"), self.facts["max_input_chars"]
        if not isinstance(text, str):
            raise SessionError("Missing 'text' field")
        if len(text) > max_chars:
            raise SessionError(f"Text too long: {len(text)} characters (maximum {max_chars})")
        voice = _string(message, "voice_id", "voice_id") or self.settings.voice
        return SynthesisParams(text=text, voice=voice, speed=self.settings.speed, language=self.settings.language)

    async def _progress(self, audio: bytes, is_final: bool) -> None:
        await self.send({"event": "task_progress", "data": {"audio": audio.hex()}, "is_final": is_final})

    async def error(self, message: str) -> None:
        await self.send({"event": "error", "message": message})

    async def send(self, payload: dict[str, Any]) -> None:
        try:
            await self.ws.send_json(payload)
        except Exception as e:  # the client went away mid-stream: stop synthesizing for it
            raise ClientGone(str(e)) from None
