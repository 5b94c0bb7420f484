"""The Realtime WebSocket's connection loop and its transcription session,
`/v1/realtime?intent=transcription` (docs/api/streaming-asr.md), over the same ASR streaming
sessions as MiniInfer's routes.

client: session.update, input_audio_buffer.append / commit / clear
server: session.created / updated, input_audio_buffer.speech_started / speech_stopped /
        committed / cleared, conversation.item.input_audio_transcription.delta / completed /
        failed, error

With `server_vad` (the default) the session's VAD ends each utterance after its pause; with
`turn_detection: null` the client commits. Every completed utterance gets one delta with its
whole text, then `completed` (Whisper decodes an utterance at once, as OpenAI's whisper-1 does).
A session.update starts a fresh ASR session (audio buffered but not committed is dropped).
Authentication is the ingress middleware's, as on /ws/v1/tts (header or subprotocol pair).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from typing import Any, ClassVar, Optional

from fastapi import WebSocket, WebSocketDisconnect

from deployments.ingress.errors import from_exception
from deployments.ingress.serving.asr_sessions import ServingASRSessions
from deployments.protocol.realtime import (
    RealtimeError,
    TranscriptionSession,
    error_event,
    event,
    new_id,
    session_pcm,
)

logger = logging.getLogger("ray.serve")
IDLE_TIMEOUT_S = 600.0


class SessionEnded(Exception):
    """The ASR session behind the socket is gone: the server closes the connection."""


class Connection:
    """One WebSocket: its configuration, the ASR session behind it, the open item. The
    conversation session (serving/conversation.py) extends it through the hooks marked so."""

    SESSION: ClassVar[type[TranscriptionSession]] = TranscriptionSession

    def __init__(self, websocket: WebSocket, streams: ServingASRSessions):
        self.ws, self.streams = websocket, streams
        self.id = new_id("sess")
        self.config = self.SESSION()
        self.sid: Optional[str] = None
        self.item: Optional[str] = None  # the utterance being spoken (server VAD)
        self.previous_item: Optional[str] = None
        self._sending = asyncio.Lock()  # a conversation's response task sends too

    async def send(self, payload: dict) -> None:
        async with self._sending:
            await self.ws.send_json(payload)

    async def speech_started(self) -> None:
        """Hook: the server VAD heard speech start (after its event is sent)."""

    async def close(self) -> None:
        """Hook: the socket is done; free what the connection holds."""
        await self.close_session()

    async def open(self, config: TranscriptionSession) -> None:
        """(Re)start the ASR session with `config`; failures leave the old one in place."""
        overrides = config.stream_overrides()
        created = await self.streams.create(
            config.model, config.language, overrides, prompt=config.prompt, logprobs=config.logprobs
        )
        await self.close_session()
        self.sid, self.item = created["sid"], None
        self.config = replace(config, model=created["model"])  # the model that serves it, by name

    async def close_session(self) -> None:
        if self.sid is not None:
            sid, self.sid = self.sid, None
            try:
                await self.streams.delete(sid)
            except Exception:  # already gone: nothing to free
                pass

    async def handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "session.update":
            await self.open(self.config.updated(message.get("session")))
            await self.send(event("session.updated", session=self.config.as_event_session(self.id)))
        elif kind == "input_audio_buffer.append":
            pcm = session_pcm(message.get("audio"), self.config.input_format)
            if pcm:
                await self.report(await self.streams.feed(self.sid, pcm))
        elif kind == "input_audio_buffer.commit":
            answer = await self.streams.call("stream_commit", self.sid)
            if answer["committed"] is None:
                raise RealtimeError(
                    "The input audio buffer is empty: nothing to commit", None, "input_audio_buffer_commit_empty"
                )
            await self.completed(answer["committed"])
        elif kind == "input_audio_buffer.clear":
            await self.streams.call("stream_clear", self.sid)
            self.item = None
            await self.send(event("input_audio_buffer.cleared"))
        else:
            raise RealtimeError(f"Unknown or unsupported event type: {kind!r}", "type", "unknown_event")

    async def report(self, answer: dict) -> None:
        """The events a chunk caused, in stream order."""
        timeline = [(u["end"], 2, "final", u) for u in answer["finalised"]]  # manual: only 30 s cuts
        if self.config.turn_detection is not None:
            timeline += [(t, 0, "started", None) for t in answer["speech_started"]]
            timeline += [(t, 1, "stopped", None) for t in answer["speech_stopped"]]
        for t, _, what, utterance in sorted(timeline, key=lambda x: x[:2]):
            if what == "started":
                self.item = new_id("item")
                await self.send(
                    event("input_audio_buffer.speech_started", audio_start_ms=round(t * 1000), item_id=self.item)
                )
                await self.speech_started()
            elif what == "stopped":
                await self.send(
                    event("input_audio_buffer.speech_stopped", audio_end_ms=round(t * 1000), item_id=self.item_id())
                )
            else:
                await self.completed(utterance)

    def item_id(self) -> str:
        if self.item is None:
            self.item = new_id("item")
        return self.item

    async def completed(self, utterance: dict) -> None:
        item = self.item_id()
        await self.send(event("input_audio_buffer.committed", item_id=item, previous_item_id=self.previous_item))
        text = utterance["text"]
        common = {"item_id": item, "content_index": 0}
        # With include logprobs, the utterance's tokens' (the one delta holds them all).
        logprobs = {"logprobs": utterance.get("logprobs", [])} if self.config.logprobs else {}
        if text:
            await self.send(
                event("conversation.item.input_audio_transcription.delta", delta=text, **common, **logprobs)
            )
        usage = {"type": "duration", "seconds": round(utterance["end"] - utterance["start"], 3)}
        await self.send(
            event(
                "conversation.item.input_audio_transcription.completed",
                transcript=text,
                usage=usage,
                **common,
                **logprobs,
            )
        )
        self.previous_item, self.item = item, None


async def serve(conn: Connection) -> None:
    try:
        await conn.open(conn.config)
    except Exception as e:
        await conn.send(error_event(f"ASR error: {from_exception(e).message}", None, "asr_unavailable"))
        await conn.ws.close(1011)
        return
    try:
        await conn.send(event("session.created", session=conn.config.as_event_session(conn.id)))
        while True:
            try:
                raw = await asyncio.wait_for(conn.ws.receive(), timeout=IDLE_TIMEOUT_S)
            except TimeoutError:
                await conn.send(
                    error_event(f"Idle timeout: no event for {IDLE_TIMEOUT_S:g} s, closing", None, "idle_timeout")
                )
                return
            if raw["type"] == "websocket.disconnect":
                return
            try:
                await _dispatch(conn, raw.get("text"))
            except SessionEnded:
                await conn.ws.close(1011)
                return
    finally:
        await conn.close()


async def _dispatch(conn: Connection, text: Optional[str]) -> None:
    message: Any = None
    try:
        if text is None:
            raise RealtimeError("Binary frames are not supported: send JSON events", None, "invalid_event")
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            raise RealtimeError("Invalid JSON", None, "invalid_json") from None
        if not isinstance(message, dict):
            raise RealtimeError("An event must be a JSON object with a `type`", "type", "invalid_event")
        await conn.handle(message)
    except RealtimeError as e:
        await conn.send(error_event(e.message, e.param, e.code, _event_id(message)))
    except WebSocketDisconnect:
        raise
    except Exception as e:
        error = from_exception(e)
        if error.code in ("session_lost", "session_not_found") or error.status_code >= 500:
            item = conn.item_id()
            body = {"type": error.type, "code": error.code, "message": error.message, "param": error.param}
            await conn.send(
                event("conversation.item.input_audio_transcription.failed", item_id=item, content_index=0, error=body)
            )
            if error.code in ("session_lost", "session_not_found"):
                conn.sid = None
                raise SessionEnded(error.message) from None
        else:
            await conn.send(error_event(error.message, error.param, error.code or "invalid_value", _event_id(message)))


def _event_id(message: Any) -> Optional[str]:
    return message.get("event_id") if isinstance(message, dict) else None
