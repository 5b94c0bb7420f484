"""The parameters of POST /v1/audio/transcriptions and /v1/audio/diarization, whichever form
carried them (multipart form, query string with a raw audio body, or a JSON body), and the
response shapes. Ray-free and MLX-free."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from deployments.protocol.errors import invalid_request
from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive

ResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt", "diarized_json"]
Granularity = Literal["segment", "word"]
SPEAKER_FORMATS = ("verbose_json", "diarized_json", "srt", "vtt")  # the formats that can say who spoke
STREAM_FORMATS = ("json", "text", "diarized_json")  # diarized_json streams transcript.text.segment events
MAX_KNOWN_SPEAKERS = 4  # OpenAI's limit
MAX_SPEAKERS = 32


class SpeakerOptions(BaseModel):
    """What both diarizing routes take: the speaker count, when known (exact, or bounds as in
    pyannote and speaches), and OpenAI's known speakers (names, and reference clips as data URLs)."""

    num_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    min_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    max_speakers: Optional[int] = Field(None, ge=1, le=MAX_SPEAKERS)
    known_speaker_names: list[str] = Field(default_factory=list)
    known_speaker_references: list[str] = Field(default_factory=list)

    @field_validator("known_speaker_names")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        names = [n.strip() for n in names]
        if any(not n or len(n) > 64 for n in names):
            raise ValueError("each known speaker name must be 1 to 64 characters")
        if len(set(names)) != len(names):
            raise ValueError("known speaker names must be different")
        return names

    def check_speakers(self) -> None:
        """400 for speaker options that contradict each other."""
        names, refs = self.known_speaker_names, self.known_speaker_references
        if len(names) > MAX_KNOWN_SPEAKERS or len(refs) > MAX_KNOWN_SPEAKERS:
            raise invalid_request(f"At most {MAX_KNOWN_SPEAKERS} known speakers are supported.", "known_speaker_names")
        if len(names) != len(refs):
            raise invalid_request(
                f"known_speaker_names has {len(names)} entries and known_speaker_references {len(refs)}: "
                "each name needs one reference clip.",
                "known_speaker_names" if len(names) > len(refs) else "known_speaker_references",
            )
        low, high = self.min_speakers, self.max_speakers
        if self.num_speakers is not None and (low is not None or high is not None):
            raise invalid_request("Send num_speakers or min_speakers/max_speakers, not both.", "num_speakers")
        if low is not None and high is not None and low > high:
            raise invalid_request(f"min_speakers ({low}) is above max_speakers ({high}).", "min_speakers")

    @property
    def speaker_options_set(self) -> bool:
        return bool(
            self.known_speaker_names
            or self.known_speaker_references
            or self.num_speakers
            or self.min_speakers
            or self.max_speakers
        )


NOT_SERVED = {
    "keywords": "keyword biasing is not served here; put the words in `prompt` (Whisper's prompt biases toward them)",
    "languages": "a list of candidate languages is not served here; send one `language`, or none to detect it",
}


class TranscriptionParams(SpeakerOptions):
    model_config = ConfigDict(extra="ignore")  # clients send extras (stream, chunking_strategy, ...)

    model: Optional[str] = None
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    language: Optional[str] = Field(None, max_length=32)
    prompt: Optional[str] = Field(None, max_length=4096)
    response_format: ResponseFormat = "json"
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    timestamp_granularities: list[Granularity] = Field(default_factory=lambda: ["segment"])
    diarize: bool = False  # MiniInfer's ?diarize=1; diarized_json implies it
    stream: bool = False  # SSE transcript.text.delta (/ .segment when diarized) / transcript.text.done events
    task: Literal["transcribe", "translate"] = "transcribe"  # set by the route, never by the client
    # OpenAI's: accepted and meaningless here (the ASR slot always cuts the audio at VAD pauses).
    chunking_strategy: Optional[Any] = None
    # OpenAI's `include[]=logprobs`: each text token's log-probability (whisper, json only).
    include: list[Literal["logprobs"]] = Field(default_factory=list)
    # OpenAI's, not served: a 400 naming them, never a transcript without what they ask for.
    keywords: list[str] = Field(default_factory=list)
    languages: list[str] = Field(default_factory=list)

    @field_validator("language", "prompt", "model")
    @classmethod
    def _blank_is_none(cls, value: Optional[str]) -> Optional[str]:
        value = value.strip() if isinstance(value, str) else value
        return value or None

    @field_validator("keywords", "languages")
    @classmethod
    def _not_served(cls, value: list[str], info) -> list[str]:
        if value:
            raise PydanticCustomError("not_served", NOT_SERVED[info.field_name])
        return value

    @field_validator("stream")
    @classmethod
    def _stream_formats(cls, value: bool, info) -> bool:
        if value and info.data.get("response_format") not in STREAM_FORMATS:
            raise ValueError(
                "stream=true sends transcript.text events; response_format must be one of " + ", ".join(STREAM_FORMATS)
            )
        return value

    @property
    def word_timestamps(self) -> bool:
        return "word" in self.timestamp_granularities

    @property
    def logprobs(self) -> bool:
        return "logprobs" in self.include

    def check_logprobs(self) -> None:
        """OpenAI gives logprobs in `json` (and its stream's events) only: another format has no
        place for them, and an answer without them is not what was asked."""
        if self.logprobs and self.response_format != "json":
            raise invalid_request(
                f"include=logprobs needs response_format 'json', not '{self.response_format}'", "include"
            )

    @property
    def diarized(self) -> bool:
        return self.diarize or self.response_format == "diarized_json"

    def check_diarization(self) -> None:
        """400 for diarization options that would be dropped or contradict each other."""
        if self.diarized and self.response_format not in SPEAKER_FORMATS:
            raise invalid_request(
                f"response_format '{self.response_format}' has no place for speakers: diarize with "
                f"{', '.join(SPEAKER_FORMATS)}.",
                "response_format",
            )
        if not self.diarized and self.speaker_options_set:
            raise invalid_request(
                "Speaker options need diarization: add diarize=true or response_format=diarized_json.", "diarize"
            )
        if self.diarized:
            self.check_speakers()


class DiarizationParams(SpeakerOptions):
    """POST /v1/audio/diarization (speaches' route): who spoke when, as JSON or RTTM."""

    model_config = ConfigDict(extra="forbid")

    model: Optional[str] = None
    response_format: Literal["json", "rttm"] = "json"


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float
    probability: Optional[float] = None


class TranscriptionSegment(BaseModel):
    """OpenAI's verbose_json segment (the fields whisper clients read)."""

    id: int
    seek: int = 0
    start: float
    end: float
    text: str
    tokens: list[int] = []
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    speaker: Optional[int] = None  # with diarize: MiniInfer's 0-based speaker


class TranscriptionLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class Transcription(BaseModel):
    """response_format "json"; `logprobs` with include=["logprobs"]."""

    text: str
    logprobs: Optional[list[TranscriptionLogprob]] = None


class VerboseTranscription(BaseModel):
    """response_format "verbose_json"; `words` only with timestamp_granularities[]=word."""

    task: str = "transcribe"
    language: Optional[str]
    duration: float
    text: str
    segments: list[TranscriptionSegment]
    words: Optional[list[TranscriptionWord]] = None
    speakers: Optional[int] = None  # with diarize: how many speakers (MiniInfer)
    speaker_labels: Optional[list[str]] = None  # with diarize: speaker i's label (A, B, ... or a known name)


class DiarizedSegment(BaseModel):
    """OpenAI's diarized_json segment (TranscriptionDiarizedSegment)."""

    type: Literal["transcript.text.segment"] = "transcript.text.segment"
    id: str
    start: float
    end: float
    text: str
    speaker: str


class DurationUsage(BaseModel):
    type: Literal["duration"] = "duration"
    seconds: float


class DiarizedTranscription(BaseModel):
    """response_format "diarized_json" (OpenAI's TranscriptionDiarized)."""

    task: Literal["transcribe"] = "transcribe"
    duration: float
    text: str
    segments: list[DiarizedSegment]
    usage: DurationUsage


class SpeakerSegment(BaseModel):
    start: float
    end: float
    speaker: str


class DiarizationResponse(BaseModel):
    """POST /v1/audio/diarization, json (speaches' `segments[{start, end, speaker}]`)."""

    duration: float
    speakers: list[str]
    segments: list[SpeakerSegment]
