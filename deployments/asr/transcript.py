"""What a transcription produces (text, segments with times, optional words), and how
whisper's timestamp tokens become segments. Pure Python: no Ray, no MLX."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
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
    # With diarization, a decoded segment where the speaker changes is cut into parts: `origin`
    # is the decoded segment's id (what streamed deltas named) and `part` the part's rank in it.
    origin: Optional[int] = None
    part: int = 0
    # With include=["logprobs"]: OpenAI's {"token", "logprob", "bytes"} per text token (whisper).
    logprobs: Optional[list[dict]] = None

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

    def logprobs(self) -> list[dict]:
        return [entry for s in self.segments for entry in (s.logprobs or [])]

    def label_speakers(self, speaker_of: SpeakerOf, labels_of: Callable[[list[int]], list[str]]) -> None:
        """Give every segment a speaker, cutting a segment with word times where the speaker
        changes (each part timed by its words). `speaker_of(start, end)` is a cluster index
        (None: nobody spoke). Speakers are renumbered 0, 1, ... in order of first appearance
        in the segments, so `speaker_labels` holds exactly the speakers the segments name;
        `labels_of(clusters)` gives their labels in that order."""
        parts, clusters = label_segments(self.segments, speaker_of)
        for i, part in enumerate(parts):
            part.id = i
        self.segments = parts
        self.speaker_labels = labels_of(clusters) if clusters else (["A"] if parts else [])

    @classmethod
    def join(cls, segments: list[Segment], language: Optional[str], duration: float) -> Transcript:
        """Number the segments in order and join their texts into the transcript's text."""
        for i, segment in enumerate(segments):
            segment.id = i
        text = " ".join(s.text.strip() for s in segments if s.text.strip())
        return cls(text=text, language=language, duration=round(duration, 3), segments=segments)


SpeakerOf = Callable[[float, float], Optional[int]]


def split_by_speaker(segment: Segment, speaker_of: SpeakerOf) -> list[Segment]:
    """`segment` with its speaker, or cut into runs of consecutive words of one speaker, each
    timed from its first word's start to its last word's end. A segment without word times
    (a model that gives none) keeps its times and gets the speaker who talks most in it."""
    words = [w for w in segment.words or [] if w.word.strip()]
    if not words:
        return [replace(segment, speaker=speaker_of(segment.start, segment.end), origin=segment.id)]
    runs: list[tuple[Optional[int], list[Word]]] = []
    for word in words:
        speaker = speaker_of(word.start, word.end)
        if runs and runs[-1][0] == speaker:
            runs[-1][1].append(word)
        else:
            runs.append((speaker, [word]))
    if len(runs) == 1:
        return [replace(segment, start=words[0].start, end=words[-1].end, speaker=runs[0][0], origin=segment.id)]
    return [
        replace(
            segment,
            start=run[0].start,
            end=run[-1].end,
            text="".join(w.word for w in run),
            tokens=[],  # the decoded tokens belong to the whole segment
            words=run,
            speaker=speaker,
            origin=segment.id,
            part=k,
        )
        for k, (speaker, run) in enumerate(runs)
    ]


def label_segments(segments: Sequence[Segment], speaker_of: SpeakerOf) -> tuple[list[Segment], list[int]]:
    """`segments` cut by speaker (`split_by_speaker`), each part's speaker renumbered 0, 1, ...
    in order of first appearance (0 where nobody spoke), and the clusters in that order."""
    parts = [part for segment in segments for part in split_by_speaker(segment, speaker_of)]
    order: dict[int, int] = {}
    for part in parts:
        part.speaker = 0 if part.speaker is None else order.setdefault(part.speaker, len(order))
    return parts, list(order)


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
