"""Reading the parameters of the audio-input routes (transcriptions, diarization) from a
multipart form or a query string, and the known speakers' reference clips (OpenAI's
`known_speaker_references[]`: data URLs of 2-10 s audio), decoded here so that a bad clip is a
400 before any slot is called."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Optional, TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError

from deployments.audio.decode import AudioDecodeError, decode_audio
from deployments.protocol.b64 import decode_base64_field
from deployments.protocol.errors import invalid_request
from deployments.protocol.transcription import SpeakerOptions

P = TypeVar("P", bound=BaseModel)
SPEAKER_FIELDS = ("num_speakers", "min_speakers", "max_speakers")
SPEAKER_LISTS = ("known_speaker_names", "known_speaker_references")
REFERENCE_RATE = 16000
REFERENCE_SECONDS = (2.0, 10.0)  # OpenAI's range for a known speaker's clip


def validated(model: type[P], fields: Mapping[str, Any]) -> P:
    """`fields` (None values dropped) as `model`, or a 400 naming the first bad field."""
    try:
        return model.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as e:
        first = e.errors()[0]
        param = ".".join(str(p) for p in first.get("loc", ())) or None
        # As the JSON routes word it (ingress/errors.py): no pydantic prefix, the field named once.
        message = first.get("msg", "invalid value").removeprefix("Value error, ")
        if not message.startswith(f"{param}:"):
            message = f"{param}: {message}"
        raise invalid_request(message, param) from None


def collect(source: Any, names: tuple[str, ...], lists: tuple[str, ...]) -> dict[str, Any]:
    """Single values and lists (sent as `name[]` or repeated `name`) from a form or query."""
    fields: dict[str, Any] = {name: source.get(name) for name in names}
    for name in lists:
        values = [v for key in (f"{name}[]", name) for v in source.getlist(key)]
        if values:
            fields[name] = values
    return fields


def data_url_bytes(text: str, param: str) -> bytes:
    """The bytes of a base64 data URL (`data:audio/wav;base64,...`) or of bare base64."""
    if text.startswith("data:"):
        header, sep, text = text.partition(",")
        if not sep or not header.endswith(";base64"):
            raise invalid_request(f"{param} must be base64 data URLs (data:audio/...;base64,...).", param)
    try:
        return decode_base64_field(text)
    except ValueError:
        raise invalid_request(f"{param} holds an entry that is not valid base64.", param) from None


def reference_clip(text: str) -> np.ndarray:
    """One known speaker's clip: decodable audio of 2-10 s, as 16 kHz mono float32."""
    param = "known_speaker_references"
    try:
        samples = decode_audio(data_url_bytes(text, param), REFERENCE_RATE)
    except AudioDecodeError as e:
        raise invalid_request(
            f"A known speaker reference is not decodable audio: {e}", param, "invalid_audio"
        ) from None
    seconds, (low, high) = len(samples) / REFERENCE_RATE, REFERENCE_SECONDS
    if not low <= seconds <= high:
        raise invalid_request(
            f"A known speaker reference is {seconds:.1f} s long; each must be {low:g} to {high:g} s.", param
        )
    return samples


async def known_speakers(options: SpeakerOptions) -> dict[str, np.ndarray]:
    """name -> reference clip, decoded off the event loop."""
    clips = await asyncio.gather(*(asyncio.to_thread(reference_clip, r) for r in options.known_speaker_references))
    return dict(zip(options.known_speaker_names, clips))


def form_fields_schema(model: type[BaseModel], names: tuple[str, ...], lists: tuple[str, ...]) -> dict[str, Any]:
    """The JSON schema of `model`'s `names` and `lists` as form fields (a list as OpenAI names
    it, `name[]`), for an OpenAPI request body: these routes read their own bodies, so FastAPI
    cannot describe them by itself."""
    properties = model.model_json_schema()["properties"]

    def field(name: str) -> dict[str, Any]:
        schema = dict(properties[name])
        for member in schema.pop("anyOf", []):  # Optional[X]: X, as a form field is absent, not null
            if member.get("type") != "null":
                schema.update(member)
        schema.pop("default", None)
        if "type" not in schema and "enum" not in schema:  # Any: a form sends it as text
            schema["type"] = "string"
        return schema

    fields = {name: field(name) for name in names}
    fields.update({f"{name}[]": field(name) for name in lists})
    return fields


def audio_body_doc(form_fields: dict[str, Any], description: str, json_fields: Optional[dict] = None) -> dict:
    """An `openapi_extra` request body: a multipart form with the audio as `file`, the audio
    bytes as the body (`description` says where its parameters go), and optionally JSON."""
    content: dict[str, Any] = {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary"}, **form_fields},
            },
        },
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
    }
    if json_fields is not None:
        content["application/json"] = {
            "schema": {
                "type": "object",
                "required": ["file"],
                "properties": {
                    "file": {"type": "string", "description": "base64 audio, or an absolute path on the server"},
                    **json_fields,
                },
            }
        }
    return {"requestBody": {"required": True, "description": description, "content": content}}
