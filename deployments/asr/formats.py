"""Transcription response formats: json, text, verbose_json, srt, vtt (OpenAI's set, what
speaches and LocalAI serve and what clients such as open-webui ask for) and OpenAI's
diarized_json, with content types. A diarized transcript (segments with a `speaker`) also puts
its speakers in verbose_json (MiniInfer's `speaker` and `speakers`) and before each cue's text
in srt ("A: ...") and vtt (WebVTT's voice span "<v A>...")."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from deployments.asr.transcript import Segment, Transcript
from deployments.protocol.transcription import (
    DiarizedSegment,
    DiarizedTranscription,
    DurationUsage,
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
    "diarized_json": "application/json",
}


def render(
    transcript: Transcript, response_format: str, *, include_words: bool = False, include_logprobs: bool = False
) -> tuple[Any, str]:
    """(body, content type): a dict for the JSON formats (checked against their typed models in
    deployments/protocol/transcription.py), a string for the others."""
    if response_format == "json":
        body = Transcription(text=transcript.text, logprobs=transcript.logprobs() if include_logprobs else None)
        return body.model_dump(exclude_none=True), CONTENT_TYPES["json"]
    if response_format == "verbose_json":
        return verbose_json(transcript, include_words), CONTENT_TYPES["verbose_json"]
    if response_format == "text":
        return transcript.text + "\n", CONTENT_TYPES["text"]
    if response_format == "srt":
        return srt(transcript.segments, transcript.speaker_labels), CONTENT_TYPES["srt"]
    if response_format == "vtt":
        return vtt(transcript.segments, transcript.speaker_labels), CONTENT_TYPES["vtt"]
    if response_format == "diarized_json":
        return diarized_json(transcript), CONTENT_TYPES["diarized_json"]
    raise ValueError(f"unknown response_format {response_format!r}")


def verbose_json(transcript: Transcript, include_words: bool) -> dict[str, Any]:
    body = VerboseTranscription(
        language=transcript.language,
        duration=transcript.duration,
        text=transcript.text,
        segments=[TranscriptionSegment.model_validate(_segment_json(s)) for s in transcript.segments],
        words=[TranscriptionWord.model_validate(asdict(w)) for w in transcript.words()] if include_words else None,
        speakers=None if transcript.speaker_labels is None else len(transcript.speaker_labels),
        speaker_labels=transcript.speaker_labels,
    )
    exclude: dict[str, Any] = {} if include_words else {"words": True}
    if transcript.speaker_labels is None:  # not diarized: the plain OpenAI shape
        exclude.update(speakers=True, speaker_labels=True, segments={"__all__": {"speaker"}})
    return body.model_dump(exclude=exclude)


def diarized_json(transcript: Transcript) -> dict[str, Any]:
    labels = transcript.speaker_labels or []
    segments = [
        DiarizedSegment(
            id=segment_id(s.id if s.origin is None else s.origin, s.part),
            start=s.start,
            end=s.end,
            text=s.text.strip(),
            speaker=_label(s, labels),
        )
        for s in transcript.segments
    ]
    body = DiarizedTranscription(
        duration=transcript.duration,
        text=transcript.text,
        segments=segments,
        usage=DurationUsage(seconds=transcript.duration),
    )
    return body.model_dump()


def segment_id(index: int, part: int = 0) -> str:
    """A diarized segment's id (OpenAI's `seg_<n>`; streamed deltas name theirs by it, as they
    are decoded). A decoded segment cut where the speaker changes keeps its id on its first
    part; the later parts are `seg_<n>_<part>`, so every delta still names the segment its text
    went to first."""
    return f"seg_{index}" if part == 0 else f"seg_{index}_{part}"


def _label(segment: Segment, labels: list[str]) -> str:
    return labels[segment.speaker] if segment.speaker is not None and segment.speaker < len(labels) else "A"


def _segment_json(segment: Segment) -> dict[str, Any]:
    data = asdict(segment)
    for internal in ("words", "origin", "part"):
        data.pop(internal)
    return data


def timestamp(seconds: float, decimal_marker: str) -> str:
    """HH:MM:SS,mmm (SRT) or HH:MM:SS.mmm (WebVTT)."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def srt(segments: list[Segment], speaker_labels: list[str] | None = None) -> str:
    blocks = [
        f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{_cue_text(s, speaker_labels, '{}: ')}\n"
        for i, s in enumerate(segments, start=1)
    ]
    return "\n".join(blocks)


def vtt(segments: list[Segment], speaker_labels: list[str] | None = None) -> str:
    cues = [
        f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{_cue_text(s, speaker_labels, '<v {}>')}\n"
        for s in segments
    ]
    return "WEBVTT\n\n" + "\n".join(cues)


def _cue_text(segment: Segment, speaker_labels: list[str] | None, prefix: str) -> str:
    """The segment's text, after `prefix` filled with its speaker's label when diarized."""
    text = segment.text.strip()
    return text if speaker_labels is None else prefix.format(_label(segment, speaker_labels)) + text
