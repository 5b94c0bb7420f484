"""What a transcription produces (text, segments with times, optional words), and how
whisper's timestamp tokens become segments. Pure Python: no Ray, no MLX."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Optional


@dataclass
class Word:
    word: str
    start: float
    end: float
    probability: Optional[float] = None


@dataclass
class Segment:
    id: int
    start: float
    end: float
    text: str
    seek: int = 0  # where the decoding window started, in 10 ms mel frames (OpenAI's field)
    tokens: list[int] = field(default_factory=list)
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    words: Optional[list[Word]] = None
    speaker: Optional[int] = None  # with diarization: index into Transcript.speaker_labels

    def shifted(self, offset_s: float) -> Segment:
        """This segment moved from window time to input time (plain floats, JSON-safe)."""
        words = (
            None
            if self.words is None
            else [
                Word(w.word, _seconds(w.start + offset_s), _seconds(w.end + offset_s), _finite(w.probability))
                for w in self.words
            ]
        )
        fields = {**asdict(self), "words": words}
        fields.update(start=_seconds(self.start + offset_s), end=_seconds(self.end + offset_s))
        for name in ("temperature", "avg_logprob", "compression_ratio", "no_speech_prob"):
            fields[name] = _finite(fields[name]) or 0.0
        return Segment(**fields)


def _seconds(value: float) -> float:
    return round(float(value), 3)


def _finite(value: Optional[float]) -> Optional[float]:
    """JSON has no NaN: a random model's log-probabilities can be NaN."""
    return None if value is None or not math.isfinite(value) else float(value)


@dataclass
class Transcript:
    text: str
    language: Optional[str]
    duration: float
    segments: list[Segment] = field(default_factory=list)
    speaker_labels: Optional[list[str]] = None  # with diarization: each speaker's label (A, B, or a known name)

    def words(self) -> list[Word]:
        return [w for s in self.segments for w in (s.words or [])]

    def label_speakers(self, speaker_of: Callable[[float, float], Optional[int]], labels: list[str]) -> None:
        """Give every segment the speaker `speaker_of(start, end)` names (0 if nobody spoke)."""
        for segment in self.segments:
            segment.speaker = speaker_of(segment.start, segment.end) or 0
        self.speaker_labels = list(labels) or (["A"] if self.segments else [])

    @classmethod
    def join(cls, segments: list[Segment], language: Optional[str], duration: float) -> Transcript:
        """Number the segments in order and join their texts into the transcript's text."""
        for i, segment in enumerate(segments):
            segment.id = i
        text = " ".join(s.text.strip() for s in segments if s.text.strip())
        return cls(text=text, language=language, duration=round(duration, 3), segments=segments)


@dataclass(frozen=True)
class TimestampVocabulary:
    """Where whisper's timestamp tokens live: ids >= `timestamp_begin`, 20 ms apart."""

    timestamp_begin: int
    eot: int
    precision_s: float = 0.02

    def is_timestamp(self, token: int) -> bool:
        return token >= self.timestamp_begin

    def seconds(self, token: int) -> float:
        return round((token - self.timestamp_begin) * self.precision_s, 3)


def segments_from_tokens(
    tokens: Sequence[int],
    vocab: TimestampVocabulary,
    decode: Callable[[list[int]], str],
    window_s: float,
) -> list[tuple[float, float, list[int], str]]:
    """Split one decoded window into (start, end, text tokens, text) segments.

    Whisper brackets each segment by timestamp tokens: <|t0|> text <|t1|><|t1|> text <|t2|>.
    Text before any timestamp starts at 0; text after the last one ends at the window's end.
    Times are relative to the window and never beyond it.
    """
    out = []
    start: Optional[float] = None
    text_tokens: list[int] = []

    def close(end: float) -> None:
        text = decode(text_tokens).strip()
        if text:
            seg_start = min(start or 0.0, window_s)
            out.append((seg_start, max(seg_start, min(end, window_s)), list(text_tokens), text))

    for token in tokens:
        if token == vocab.eot:
            break
        if vocab.is_timestamp(token):
            t = vocab.seconds(token)
            if text_tokens:
                close(t)
                text_tokens = []
                start = None
            else:
                start = t
        else:
            text_tokens.append(token)
    if text_tokens:
        close(window_s)
    return out
