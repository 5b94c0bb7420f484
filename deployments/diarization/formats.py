"""The answers of POST /v1/audio/diarization: speaches' JSON (`segments[{start, end, speaker}]`)
and RTTM (NIST's format, what pyannote writes: one `SPEAKER` line per turn). Pure."""

from __future__ import annotations

from typing import Any

from deployments.diarization.spans import Diarization
from deployments.protocol.transcription import DiarizationResponse, SpeakerSegment

CONTENT_TYPES = {"json": "application/json", "rttm": "text/plain; charset=utf-8"}


def diarization_json(diarization: Diarization) -> dict[str, Any]:
    segments = [
        SpeakerSegment(start=round(t.start, 3), end=round(t.end, 3), speaker=diarization.labels[t.speaker])
        for t in diarization.turns
    ]
    body = DiarizationResponse(duration=round(diarization.duration, 3), speakers=diarization.labels, segments=segments)
    return body.model_dump()


def rttm(diarization: Diarization, file_id: str = "audio") -> str:
    """`SPEAKER <file> 1 <start> <duration> <NA> <NA> <speaker> <NA> <NA>` per turn; names
    with spaces get underscores (RTTM fields are space-separated)."""
    file_id = "_".join(file_id.split()) or "audio"
    return "".join(
        f"SPEAKER {file_id} 1 {t.start:.3f} {t.end - t.start:.3f} <NA> <NA> "
        f"{'_'.join(diarization.labels[t.speaker].split())} <NA> <NA>\n"
        for t in diarization.turns
    )
