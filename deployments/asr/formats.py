"""Transcription response formats: json, text, verbose_json, srt, vtt (OpenAI's set, what
speaches and LocalAI serve and what clients such as open-webui ask for), with content types."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from deployments.asr.transcript import Segment, Transcript
from deployments.protocol.transcription import (
    Transcription,
    TranscriptionSegment,
    TranscriptionWord,
    VerboseTranscription,
)

CONTENT_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def render(transcript: Transcript, response_format: str, *, include_words: bool = False) -> tuple[Any, str]:
    """(body, content type): a dict for the JSON formats (checked against their typed models in
    deployments/protocol/transcription.py), a string for the others."""
    if response_format == "json":
        return Transcription(text=transcript.text).model_dump(), CONTENT_TYPES["json"]
    if response_format == "verbose_json":
        return verbose_json(transcript, include_words), CONTENT_TYPES["verbose_json"]
    if response_format == "text":
        return transcript.text + "\n", CONTENT_TYPES["text"]
    if response_format == "srt":
        return srt(transcript.segments), CONTENT_TYPES["srt"]
    if response_format == "vtt":
        return vtt(transcript.segments), CONTENT_TYPES["vtt"]
    raise ValueError(f"unknown response_format {response_format!r}")


def verbose_json(transcript: Transcript, include_words: bool) -> dict[str, Any]:
    body = VerboseTranscription(
        language=transcript.language,
        duration=transcript.duration,
        text=transcript.text,
        segments=[TranscriptionSegment.model_validate(_segment_json(s)) for s in transcript.segments],
        words=[TranscriptionWord.model_validate(asdict(w)) for w in transcript.words()] if include_words else None,
    )
    return body.model_dump(exclude={"words"} if not include_words else None)


def _segment_json(segment: Segment) -> dict[str, Any]:
    data = asdict(segment)
    data.pop("words")
    return data


def timestamp(seconds: float, decimal_marker: str) -> str:
    """HH:MM:SS,mmm (SRT) or HH:MM:SS.mmm (WebVTT)."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def srt(segments: list[Segment]) -> str:
    blocks = [
        f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate(segments, start=1)
    ]
    return "\n".join(blocks)


def vtt(segments: list[Segment]) -> str:
    cues = [f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{s.text.strip()}\n" for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)
