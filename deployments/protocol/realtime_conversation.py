"""OpenAI's Realtime conversation session (`/v1/realtime` without `intent=transcription`), GA
event shapes as the openai SDK 3.x types them (openai/types/realtime/): the session a client
configures (the transcription session's input side, plus instructions, the output voice and
modalities, function tools), the conversation's items (messages, function calls and their
outputs) and the chat request they make for the LLM, the response object, and the output audio
framing.

The input side (audio format, server VAD, the ASR model) is `TranscriptionSession`'s, parsed by
the same code. Ray-free and MLX-free; the WebSocket is deployments/ingress/serving/conversation.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional, Union

import numpy as np

from deployments.audio.resample import resample
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ToolCall, UsageInfo
from deployments.protocol.realtime import (
    AudioFormat,
    RealtimeError,
    TranscriptionSession,
    audio_format,
    known_fields,
    object_at,
    unset,
)
from deployments.protocol.realtime_items import ConversationItems
from deployments.protocol.responses import chat_tool_choice, chat_tools

OUTPUT_RATE = 24000  # audio/pcm output is 24 kHz PCM16 mono in OpenAI's API
MODALITIES = (("audio",), ("text",))  # OpenAI: audio (with its transcript) or text only
ROLES = ("user", "system")  # the messages a client adds


# What a response.create's `response` may set (`metadata` is the client's own, accepted).
RESPONSE_FIELDS = (
    "audio",
    "conversation",
    "input",
    "instructions",
    "max_output_tokens",
    "metadata",
    "output_modalities",
    "prompt",
    "tool_choice",
    "tools",
)
NO_STORED_PROMPTS = "stored prompts are not kept here: send `instructions`"


# OpenAI's speech-to-speech model names (gpt-realtime, gpt-realtime-2.1, gpt-4o-mini-realtime-
# preview, ...; the Agents SDK's default is one): here a session's pipeline (ASR, the LLM slot's
# default, TTS) stands for them.
OPENAI_REALTIME_MODEL = re.compile(r"^gpt-(4o-(mini-)?)?realtime", re.IGNORECASE)


def session_llm(model: Optional[str]) -> Optional[str]:
    """The LLM a session's `model` (or the URL's `?model=`) names; None: the LLM slot's default."""
    return None if model is None or OPENAI_REALTIME_MODEL.match(model) else model


@dataclass(frozen=True)
class ConversationSession(TranscriptionSession):
    TYPE: ClassVar[str] = "realtime"
    # `tracing` is accepted and has no effect: it names OpenAI's trace dashboard.
    FIELDS: ClassVar[tuple[str, ...]] = (
        *TranscriptionSession.FIELDS,
        "instructions",
        "max_output_tokens",
        "model",
        "output_modalities",
        "prompt",
        "tool_choice",
        "tools",
        "tracing",
        "truncation",
    )
    AUDIO: ClassVar[tuple[str, ...]] = ("input", "output")
    llm: Optional[str] = None  # the LLM that answers (`model`; the URL's `?model=` first)
    instructions: Optional[str] = None
    voice: Optional[str] = None  # None: the TTS model's default voice
    output_format: AudioFormat = AudioFormat("audio/pcm", OUTPUT_RATE)
    speed: float = 1.0
    output_modalities: tuple[str, ...] = ("audio",)
    max_output_tokens: Optional[int] = None  # None: "inf", the LLM's own limit
    tools: tuple[dict, ...] = ()  # function tools in Realtime's shape: {type, name, description, parameters}
    tool_choice: Union[str, dict] = "auto"  # auto | none | required | {type: function, name}
    truncation: str = "auto"  # auto: the oldest turns are left out when the LLM's context is full

    @property
    def speaks(self) -> bool:
        return "audio" in self.output_modalities

    def as_event_session(self, session_id: str) -> dict:
        transcription = super().as_event_session(session_id)
        output = {"format": self.output_format.shown(), "voice": self.voice, "speed": self.speed}
        return {
            "type": "realtime",
            "id": session_id,
            "object": "realtime.session",
            "model": self.llm,
            "instructions": self.instructions,
            "output_modalities": list(self.output_modalities),
            "max_output_tokens": self.max_output_tokens or "inf",
            "tools": list(self.tools),
            "tool_choice": self.tool_choice,
            "truncation": self.truncation,
            "audio": {"input": transcription["audio"]["input"], "output": output},
            **({"include": transcription["include"]} if "include" in transcription else {}),
        }

    def updated(self, session: Any) -> ConversationSession:
        new, output = super().updated(session).applied(session, "session")
        unset(session, "prompt", "session", NO_STORED_PROMPTS)
        why = "`auto` leaves the oldest turns out when the context is full, `disabled` never does; no retention ratio"
        unset(session, "truncation", "session", why, (None, "auto", "disabled"))
        if session.get("truncation") is not None:
            new = replace(new, truncation=session["truncation"])
        if "model" in session:
            if not isinstance(session["model"], str) or not session["model"]:
                raise RealtimeError("`session.model` must be a model id", "session.model")
            new = replace(new, llm=session_llm(session["model"]))
        if "format" in output:
            fmt = audio_format(output["format"], "session.audio.output.format", (OUTPUT_RATE,))
            new = replace(new, output_format=fmt)
        if "speed" in output:
            speed = output["speed"]
            if not isinstance(speed, (int, float)) or isinstance(speed, bool) or not 0.25 <= speed <= 4:
                raise RealtimeError("speed must be a number from 0.25 to 4", "session.audio.output.speed")
            new = replace(new, speed=float(speed))
        return new

    def for_response(self, params: Any) -> ConversationSession:
        """The settings one response.create's `response` overrides for that response."""
        if params is None:
            return self
        if not isinstance(params, dict):
            raise RealtimeError("`response` must be an object", "response")
        known_fields(params, RESPONSE_FIELDS, "response")
        known_fields(object_at(params, "audio", "response.audio"), ("output",), "response.audio")
        unset(params, "prompt", "response", NO_STORED_PROMPTS)
        unset(params, "input", "response", "a response answers the conversation", (None,))
        why = "every response answers the conversation and joins it"
        unset(params, "conversation", "response", why, (None, "auto"))
        return self.applied(params, "response")[0]

    def applied(self, fields: dict, prefix: str) -> tuple[ConversationSession, dict]:
        """What a session.update's `session` and a response.create's `response` both set
        (instructions, output_modalities, max_output_tokens, the output voice), and their
        `audio.output` object."""
        parsers = {
            "instructions": _text,
            "output_modalities": modalities,
            "max_output_tokens": max_tokens,
            "tools": _tools,
            "tool_choice": lambda value, param: value if value is not None else "auto",
        }
        changes = {k: parse(fields[k], f"{prefix}.{k}") for k, parse in parsers.items() if k in fields}
        output = object_at(object_at(fields, "audio", f"{prefix}.audio"), "output", f"{prefix}.audio.output")
        known_fields(output, ("format", "speed", "voice"), f"{prefix}.audio.output")
        if "voice" in output:
            changes["voice"] = _voice(output["voice"], f"{prefix}.audio.output.voice")
        new = replace(self, **changes)
        new.chat_tools(prefix)  # the tools and the choice, checked together
        return new, output

    def chat_tools(self, prefix: str = "session") -> dict[str, Any]:
        """The tools and tool_choice of the LLM's chat request (none when there are no tools);
        a RealtimeError names the field under `prefix` when they are not served."""
        forced = self.tool_choice not in ("auto", "none")
        if not self.tools:
            if forced:
                raise RealtimeError("tool_choice forces a tool call, but there are no tools", f"{prefix}.tool_choice")
            return {}
        try:
            return {
                "tools": chat_tools(list(self.tools)),
                "tool_choice": chat_tool_choice(self.tool_choice, list(self.tools)),
            }
        except APIError as e:
            raise RealtimeError(e.message, f"{prefix}.{e.param}" if e.param else prefix) from None

    def chat_body(self, items: ConversationItems, first_turn: int = 0) -> dict[str, Any]:
        """The LLM's streamed chat request: the instructions as the system prompt, then the
        conversation (user and assistant turns, tool calls and their results) from its
        `first_turn` (a user message) on."""
        messages = items.chat_messages(self.instructions, first_turn)
        body = {"model": self.llm, "messages": messages, "max_tokens": self.max_output_tokens}
        # A response is a turn of the conversation: it says something (a model that would end
        # at once, as a small one sometimes does after a tool's output, writes a token first).
        return {**body, **self.chat_tools(), "min_tokens": 1, "stream": True}


def _tools(value: Any, param: str) -> tuple[dict, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise RealtimeError("`tools` must be a list of tool objects", param)
    return tuple(value)


def _voice(value: Any, param: str) -> Optional[str]:
    return _text(value.get("id") if isinstance(value, dict) else value, param)  # {"id": ...}: a custom voice


def _text(value: Any, param: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise RealtimeError(f"`{param}` must be a string", param)
    return value if value and value.strip() else None


def modalities(value: Any, param: str) -> tuple[str, ...]:
    if not isinstance(value, list) or tuple(value) not in MODALITIES:
        raise RealtimeError('output_modalities must be ["audio"] or ["text"]', param)
    return tuple(value)


def max_tokens(value: Any, param: str) -> Optional[int]:
    if value == "inf" or value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 4096:
        raise RealtimeError('max_output_tokens must be an integer from 1 to 4096, or "inf"', param)
    return value


def input_message(item: Any) -> tuple[str, str]:
    """The role and text of a conversation.item.create's user or system message (input_text
    parts joined)."""
    param = "item"
    if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") not in ROLES:
        raise RealtimeError(
            "Only user and system messages ({type: message, role: user, content: [...]}) and "
            "function_call_output items can be added",
            param,
        )
    content = item.get("content")
    if not isinstance(content, list) or not content:
        raise RealtimeError("A message needs `content`: a list of input_text parts", "item.content")
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "input_text" or not isinstance(part.get("text"), str):
            raise RealtimeError("Only input_text parts are supported: {type: input_text, text: ...}", "item.content")
        texts.append(part["text"])
    text = " ".join(t.strip() for t in texts if t.strip())
    if not text:
        raise RealtimeError("The message has no text", "item.content")
    return item["role"], text


def usage_object(usage: Optional[UsageInfo]) -> Optional[dict]:
    """A response's token counts in Realtime's shape: the LLM's text tokens (the speech is
    synthesized from the text, no audio tokens)."""
    if usage is None:
        return None
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return {
        "total_tokens": usage.total_tokens,
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "input_token_details": {
            "text_tokens": usage.prompt_tokens,
            "audio_tokens": 0,
            "image_tokens": 0,
            "cached_tokens": cached or 0,
            "cached_tokens_details": {"text_tokens": cached or 0, "audio_tokens": 0, "image_tokens": 0},
        },
        "output_token_details": {"text_tokens": usage.completion_tokens, "audio_tokens": 0},
    }


def function_output(item: dict) -> tuple[str, str]:
    """The call id and output of a conversation.item.create's function_call_output item."""
    call_id, output = item.get("call_id"), item.get("output")
    if not isinstance(call_id, str) or not call_id:
        raise RealtimeError("A function_call_output item needs the `call_id` of the call it answers", "item.call_id")
    if not isinstance(output, str):
        raise RealtimeError("A function_call_output item needs `output`: a string", "item.output")
    return call_id, output


def function_call_item(item_id: str, call: ToolCall, status: str, arguments: Optional[str] = None) -> dict:
    """A function call the model made (`arguments` "" while it is announced)."""
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call",
        "status": status,
        "name": call.function.name,
        "call_id": call.id,
        "arguments": call.function.arguments if arguments is None else arguments,
    }


def function_output_item(item_id: str, call_id: str, output: str) -> dict:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "function_call_output",
        "status": "completed",
        "call_id": call_id,
        "output": output,
    }


def user_item(item_id: str, text: str, audio: bool, role: str = "user") -> dict:
    """A user message item: an utterance's transcript, or text a client added (a system
    message too)."""
    part = {"type": "input_audio", "transcript": text} if audio else {"type": "input_text", "text": text}
    return _message(item_id, role, part, "completed")


def assistant_item(item_id: str, text: str, audio: bool, status: str) -> dict:
    part = {"type": "output_audio", "transcript": text} if audio else {"type": "output_text", "text": text}
    return _message(item_id, "assistant", part, status)


def _message(item_id: str, role: str, part: dict, status: str) -> dict:
    return {
        "id": item_id,
        "object": "realtime.item",
        "type": "message",
        "role": role,
        "status": status,
        "content": [part],
    }


def response_object(
    response_id: str, session: ConversationSession, status: str, output: list, details=None, usage=None
) -> dict:
    """The `response` of response.created (status in_progress) and response.done."""
    audio = {"output": {"format": session.output_format.shown(), "voice": session.voice}}
    return {
        "id": response_id,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
        "output": output,
        "output_modalities": list(session.output_modalities),
        "audio": audio,
        "max_output_tokens": session.max_output_tokens or "inf",
        "conversation_id": None,
        "usage": usage_object(usage),
    }


def output_audio(pcm: bytes, rate: int, fmt: AudioFormat) -> bytes:
    """TTS PCM16 at `rate` in the session's output format (PCM16 at 24 kHz, or G.711 at 8 kHz)."""
    if fmt == AudioFormat("audio/pcm", rate):
        return pcm
    return fmt.encode(resample(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0, rate, fmt.rate))
