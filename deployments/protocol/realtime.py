"""OpenAI's Realtime API for transcription (`/v1/realtime?intent=transcription`), GA event names
as the openai SDK 3.x types them: the session configuration a client may set, the server events,
and the audio framing. Ray-free and MLX-free; the WebSocket itself is
deployments/ingress/serving/realtime.py, and the conversation session built on this one is
deployments/protocol/realtime_conversation.py.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

import numpy as np

from deployments.audio.encode import to_pcm16
from deployments.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from deployments.audio.resample import resample

RATES = (24000, 16000)  # audio/pcm input rates accepted (24 kHz is OpenAI's)
SESSION_RATE = 16000  # what the ASR session takes
G711_RATE = 8000  # audio/pcmu and audio/pcma: telephone audio, one byte a sample
G711 = {"audio/pcmu": (ulaw_decode, ulaw_encode), "audio/pcma": (alaw_decode, alaw_encode)}
# Realtime events carry no partial hypotheses (each utterance is decoded once, when it ends), so
# the ASR session never spends a decode on one.
NO_PARTIALS = {"partial_every_s": float("inf")}


@dataclass(frozen=True)
class AudioFormat:
    """`audio/pcm` (PCM16 little-endian at `rate`), or G.711 `audio/pcmu` / `audio/pcma` at 8 kHz."""

    type: str = "audio/pcm"
    rate: int = 24000

    def shown(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}

    def decode(self, raw: bytes) -> np.ndarray:
        """Bytes in this format as float samples in [-1, 1) at `rate`."""
        if self.type in G711:
            return G711[self.type][0](raw).astype(np.float32) / 32768.0
        if len(raw) % 2:
            raise RealtimeError("`audio` has an odd number of bytes: PCM16 samples are 2 bytes each", "audio")
        return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0

    def encode(self, samples: np.ndarray) -> bytes:
        """Float samples at `rate` in this format."""
        pcm16 = to_pcm16(samples)
        return G711[self.type][1](np.frombuffer(pcm16, "<i2")) if self.type in G711 else pcm16


def audio_format(value: Any, param: str, pcm_rates: tuple[int, ...]) -> AudioFormat:
    """A session's `format` object: audio/pcm at one of `pcm_rates`, or audio/pcmu / pcma."""
    if not isinstance(value, dict):
        raise RealtimeError(f"`{param}` must be an object", param)
    known_fields(value, ("type", "rate"), param)
    kind = value.get("type", "audio/pcm")
    if kind in G711:
        if value.get("rate", G711_RATE) != G711_RATE:
            raise RealtimeError(f"{kind} is 8000 Hz audio", f"{param}.rate")
        return AudioFormat(kind, G711_RATE)
    if kind != "audio/pcm":
        raise RealtimeError("The audio formats are audio/pcm, audio/pcmu and audio/pcma", f"{param}.type")
    rate = value.get("rate", pcm_rates[0])
    if rate not in pcm_rates:
        raise RealtimeError(f"audio/pcm rate must be one of {pcm_rates}", f"{param}.rate")
    return AudioFormat("audio/pcm", rate)


class RealtimeError(Exception):
    """Reported as an `error` event; the connection stays open."""

    def __init__(self, message: str, param: Optional[str] = None, code: str = "invalid_value"):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


# OpenAI's GA fields (openai/types/realtime/), each served, refused by name when set to what is
# not served, or (an unknown name) refused as OpenAI refuses it: never silently dropped.
TURN_FIELDS = ("type", "threshold", "prefix_padding_ms", "silence_duration_ms", "create_response", "interrupt_response")
INPUT_FIELDS = ("format", "noise_reduction", "transcription", "turn_detection")


def known_fields(fields: dict, allowed: tuple[str, ...], name: str) -> None:
    for key in fields:
        if key not in allowed:
            raise RealtimeError(f"Unknown parameter: '{name}.{key}'", f"{name}.{key}", "unknown_parameter")


def unset(fields: dict, key: str, name: str, why: str, served: tuple = (None,)) -> None:
    """`key` is served only at the values `served` (its absence, null): else an error saying why."""
    if key in fields and fields[key] not in served:
        raise RealtimeError(f"`{name}.{key}` is not served: {why}", f"{name}.{key}", "unsupported_parameter")


LOGPROBS_INCLUDE = "item.input_audio_transcription.logprobs"
SEMANTIC_FIELDS = ("type", "eagerness", "create_response", "interrupt_response")
# semantic_vad's eagerness -> (the pause that asks whether the words are finished, the pause that
# ends the turn anyway); OpenAI's longest waits: low 8 s, medium 4 s, high 2 s; auto is medium.
EAGERNESS = {"low": (0.8, 8.0), "medium": (0.5, 4.0), "high": (0.3, 2.0), "auto": (0.5, 4.0)}


@dataclass(frozen=True)
class TurnDetection:
    """server_vad's settings (OpenAI's defaults), or semantic_vad's (`eagerness` set): a pause
    ends the turn when the words heard sound finished (deployments/asr/streaming.py,
    `sounds_complete`), else the longest pause of that eagerness does."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True  # a conversation answers each utterance VAD ends
    interrupt_response: bool = True  # and speech starting stops the answer playing
    eagerness: Optional[str] = None  # semantic_vad's; None: server_vad

    def stream_overrides(self) -> dict:
        """The ASR session's StreamConfig fields these set."""
        pause_s, max_pause_s = self.silence_duration_ms / 1000, None
        if self.eagerness is not None:
            pause_s, max_pause_s = EAGERNESS[self.eagerness]
        return {
            "threshold": self.threshold,
            "preroll_s": self.prefix_padding_ms / 1000,
            "pause_s": pause_s,
            "max_pause_s": max_pause_s,
            "auto_finalize": True,
            **NO_PARTIALS,
        }

    def shown(self) -> dict:
        """As session.created / session.updated show it."""
        if self.eagerness is not None:
            flags = {"create_response": self.create_response, "interrupt_response": self.interrupt_response}
            return {"type": "semantic_vad", "eagerness": self.eagerness, **flags}
        fields = {k: v for k, v in self.__dict__.items() if k != "eagerness"}
        return {"type": "server_vad", **fields}


@dataclass(frozen=True)
class TranscriptionSession:
    TYPE: ClassVar[str] = "transcription"
    FIELDS: ClassVar[tuple[str, ...]] = ("type", "audio", "include")
    AUDIO: ClassVar[tuple[str, ...]] = ("input",)
    input_format: AudioFormat = AudioFormat()
    model: Optional[str] = None
    language: Optional[str] = None
    prompt: Optional[str] = None
    turn_detection: Optional[TurnDetection] = TurnDetection()  # None: manual commits
    logprobs: bool = False  # include: each transcription's token log-probabilities

    def stream_overrides(self) -> dict:
        if self.turn_detection is None:
            return {"auto_finalize": False, **NO_PARTIALS}
        return self.turn_detection.stream_overrides()

    def as_event_session(self, session_id: str) -> dict:
        """The `session` object of session.created / session.updated."""
        turn = None
        if self.turn_detection is not None:
            turn = self.turn_detection.shown()
        return {
            **({"include": [LOGPROBS_INCLUDE]} if self.logprobs else {}),
            "type": "transcription",
            "id": session_id,
            "object": "realtime.transcription_session",
            "audio": {
                "input": {
                    "format": self.input_format.shown(),
                    "transcription": {"model": self.model, "language": self.language, "prompt": self.prompt},
                    "turn_detection": turn,
                }
            },
        }

    def updated(self, session: Any) -> TranscriptionSession:
        """This configuration with a session.update's `session` applied (all or nothing)."""
        if not isinstance(session, dict):
            raise RealtimeError("session.update needs a `session` object", "session")
        if session.get("type", self.TYPE) != self.TYPE:
            raise RealtimeError(f"This connection serves {self.TYPE} sessions only", "session.type")
        known_fields(session, self.FIELDS, "session")
        new = self._with_include(session)
        audio = object_at(session, "audio", "session.audio")
        known_fields(audio, self.AUDIO, "session.audio")
        audio_input = object_at(audio, "input", "session.audio.input")
        known_fields(audio_input, INPUT_FIELDS, "session.audio.input")
        unset(audio_input, "noise_reduction", "session.audio.input", "no noise reduction runs before the ASR slot")
        if "format" in audio_input:
            fmt = audio_format(audio_input["format"], "session.audio.input.format", RATES)
            new = replace(new, input_format=fmt)
        if "transcription" in audio_input:
            t = object_at(audio_input, "transcription", "session.audio.input.transcription")
            known_fields(t, ("model", "language", "prompt"), "session.audio.input.transcription")
            fields = {k: t.get(k) for k in ("model", "language", "prompt")}
            for k, v in fields.items():
                if v is not None and not isinstance(v, str):
                    raise RealtimeError(f"transcription.{k} must be a string", f"session.audio.input.transcription.{k}")
            new = replace(new, **{k: v or None for k, v in fields.items()})
        if "turn_detection" in audio_input:
            new = replace(new, turn_detection=_turn_detection(audio_input["turn_detection"]))
        return new

    def _with_include(self, session: dict) -> TranscriptionSession:
        """`include`: null, [] or the transcriptions' log-probabilities, the one extra served."""
        if "include" not in session:
            return self
        include = session["include"] or []
        if not isinstance(include, list) or any(item != LOGPROBS_INCLUDE for item in include):
            raise RealtimeError(
                f"`session.include` is not served beyond [{LOGPROBS_INCLUDE!r}]",
                "session.include",
                "unsupported_parameter",
            )
        return replace(self, logprobs=bool(include))


def object_at(parent: dict, key: str, name: str) -> dict:
    value = parent.get(key, {})
    if not isinstance(value, dict):
        raise RealtimeError(f"`{name}` must be an object", name)
    return value


def _turn_detection(value: Any) -> Optional[TurnDetection]:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    if isinstance(value, dict) and value.get("type") == "semantic_vad":
        return _semantic_vad(value, param)
    if not isinstance(value, dict) or value.get("type") != "server_vad":
        raise RealtimeError(
            "turn_detection must be null (manual commits), {type: server_vad, ...} or {type: semantic_vad, ...}", param
        )
    known_fields(value, (*TURN_FIELDS, "idle_timeout_ms"), param)
    unset(value, "idle_timeout_ms", param, "the server does not prompt a silent user")
    t = TurnDetection()
    threshold = value.get("threshold", t.threshold)
    padding = value.get("prefix_padding_ms", t.prefix_padding_ms)
    silence = value.get("silence_duration_ms", t.silence_duration_ms)
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 < threshold < 1:
        raise RealtimeError("threshold must be a number between 0 and 1", f"{param}.threshold")
    for name, v, hi in (("prefix_padding_ms", padding, 5000), ("silence_duration_ms", silence, 10000)):
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
            raise RealtimeError(f"{name} must be an integer from 0 to {hi}", f"{param}.{name}")
    if silence < 32:
        raise RealtimeError("silence_duration_ms must be at least 32 (one VAD window)", f"{param}.silence_duration_ms")
    flags = {k: value.get(k, True) for k in ("create_response", "interrupt_response")}
    for name, v in flags.items():
        if not isinstance(v, bool):
            raise RealtimeError(f"{name} must be a boolean", f"{param}.{name}")
    return TurnDetection(float(threshold), padding, silence, **flags)


def _semantic_vad(value: dict, param: str) -> TurnDetection:
    known_fields(value, SEMANTIC_FIELDS, param)
    eagerness = value.get("eagerness", "auto")
    if eagerness not in EAGERNESS:
        raise RealtimeError("eagerness must be one of low, medium, high, auto", f"{param}.eagerness")
    flags = {k: value.get(k, True) for k in ("create_response", "interrupt_response")}
    for name, v in flags.items():
        if not isinstance(v, bool):
            raise RealtimeError(f"{name} must be a boolean", f"{param}.{name}")
    return TurnDetection(eagerness=eagerness, **flags)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(8)}"


def event(type: str, **fields: Any) -> dict:
    return {"type": type, "event_id": new_id("event"), **fields}


def error_event(message: str, param: Optional[str] = None, code: str = "invalid_value", event_id=None) -> dict:
    error = {"type": "invalid_request_error", "code": code, "message": message, "param": param, "event_id": event_id}
    return event("error", error=error)


def session_pcm(audio: Any, fmt: AudioFormat) -> bytes:
    """An append's base64 audio in the session's input format as PCM16 at the ASR's 16 kHz."""
    if not isinstance(audio, str) or not audio:
        raise RealtimeError("input_audio_buffer.append needs `audio`: base64 audio", "audio")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise RealtimeError("`audio` is not valid base64", "audio") from None
    samples = fmt.decode(raw)  # checks the bytes in every format
    if fmt == AudioFormat("audio/pcm", SESSION_RATE):
        return raw
    return AudioFormat("audio/pcm", SESSION_RATE).encode(resample(samples, fmt.rate, SESSION_RATE))
