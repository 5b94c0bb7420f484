"""Streaming transcription sessions without Ray or MLX: what a session keeps between chunks and
when it decodes (docs/api/streaming-asr.md).

A session receives 16 kHz mono PCM16 in chunks. Its current utterance's audio is buffered; a
voice activity detector (Silero, run by the ASR replica) gives one speech probability per
32 ms window of the stream, and this module turns them into decisions:

- a pause of `pause_s` after speech ends the utterance (it is decoded whole, as a file would be,
  and becomes a segment of the session's text); with `max_pause_s` set (the Realtime API's
  semantic_vad), that pause only asks whether the words so far sound finished (the replica
  decodes them: `sounds_complete`), and ends the utterance if they do; otherwise a pause of
  `max_pause_s` ends it;
- an utterance reaching `max_utterance_s` is cut there (Whisper sees at most 30 s);
- while speech goes on, a partial hypothesis is due once `partial_every_s` of new audio came;
- before any speech only `preroll_s` of audio is kept, so silence costs nothing.

Segments keep their start and end in stream time. A diarized session (`speakers`, a
`SpeakerTrack`) gives each a `speaker` from the clustering of every utterance heard so far, and
a top-level `speakers` count: provisional while the session runs, globally consistent in the
final answer (deployments/diarization/track.py).
The same state machine serves MiniInfer's HTTP sessions and the Realtime WebSocket (where
`auto_finalize=False` means manual commits).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from deployments.asr.transcript import Segment, Word, label_segments
from deployments.diarization.track import SpeakerTrack
from deployments.protocol.errors import APIError, invalid_request

RATE = 16000
VAD_WINDOW = 512  # samples per speech probability (Silero's 32 ms window)


@dataclass(frozen=True)
class StreamConfig:
    """How a session decides; MiniInfer's numbers by default."""

    partial_every_s: float = 0.5
    pause_s: float = 0.7
    max_utterance_s: float = 30.0
    preroll_s: float = 0.3
    threshold: float = 0.5
    auto_finalize: bool = True  # False: utterances end only on commit() (Realtime, manual turns)
    # Semantic end of turn: a pause of pause_s ends the utterance only if its words sound
    # finished; this long a pause ends it anyway. None: a pause of pause_s ends it.
    max_pause_s: Optional[float] = None

    @property
    def neg_threshold(self) -> float:
        """Speech ends below this (silero-vad's hysteresis)."""
        return max(self.threshold - 0.15, 0.01)


# Words an unfinished sentence ends on: a conjunction, an article, a preposition, a filler.
TRAILING_WORDS = frozenset(
    "and or but so because if when while then the a an to of in on at for with from my your um uh er hmm like".split()
)


SENTENCE_ENDS = ".?!。？！"  # Latin and CJK full stops, question and exclamation marks


def sounds_complete(text: str) -> bool:
    """Whether an utterance's transcript sounds like a finished turn: it ends a sentence (Whisper
    punctuates one it hears as finished) and not on a word a sentence goes on from; silence or
    noise (no words) counts as finished, so it is not held."""
    text = text.strip()
    if not text:
        return True
    if text.endswith(("...", "…", ",", "-", "—", ";", ":")) or text[-1] not in SENTENCE_ENDS:
        return False
    last = text.rstrip(SENTENCE_ENDS).split()
    return not last or last[-1].lower().strip("\"'") not in TRAILING_WORDS


def pcm16_samples(body: bytes, max_bytes: int) -> np.ndarray:
    """A raw s16le chunk as float32 in [-1, 1); anything that is not PCM16 is a 400."""
    if not body:
        raise invalid_request("The chunk is empty: send raw s16le 16 kHz mono PCM as the body.", "body", "invalid_pcm")
    if len(body) > max_bytes:
        raise invalid_request(
            f"The chunk is {len(body)} bytes, over the limit of {max_bytes} bytes: send smaller chunks.",
            "body",
            "chunk_too_large",
        )
    if len(body) % 2:
        raise invalid_request(
            f"The chunk has an odd number of bytes ({len(body)}): PCM16 samples are 2 bytes each.",
            "body",
            "invalid_pcm",
        )
    return np.frombuffer(body, dtype="<i2").astype(np.float32) / 32768.0


@dataclass
class Utterance:
    """A finalised piece of the stream: its times in stream seconds and its text; in a diarized
    session, its words (stream seconds) too, which time its segments and cut them by speaker."""

    start: float
    end: float
    text: str
    words: Optional[list[Word]] = None

    def as_dict(self) -> dict:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text}


@dataclass
class Cut:
    """An utterance that ended: its audio and where it started in the stream (samples)."""

    start: int
    audio: np.ndarray
    forced: bool = False  # cut at max_utterance_s, not at a pause

    @property
    def end(self) -> int:
        return self.start + len(self.audio)


@dataclass
class FeedResult:
    cuts: list[Cut] = field(default_factory=list)
    partial_due: bool = False
    speech_started: list[int] = field(default_factory=list)  # stream sample offsets
    speech_stopped: list[int] = field(default_factory=list)
    # A semantic pause: do the words so far sound finished? (end_turn() if they do)
    end_check: bool = False


class StreamSession:
    """One session's audio and hypotheses. Not thread-safe: the replica serialises a session's
    requests (one lock per session)."""

    def __init__(
        self,
        sid: str,
        model: Optional[str],
        config: StreamConfig,
        clock: Callable[[], float] = time.monotonic,
        speakers: Optional[SpeakerTrack] = None,
    ):
        self.sid = sid
        self.speakers = speakers  # diarized sessions only
        self.model = model
        self.config = config
        self._clock = clock
        self.created = self.last_used = clock()
        self.received = 0  # stream samples so far
        self.start = 0  # stream offset of the buffer's first sample
        self.buffer = np.zeros(0, np.float32)
        self.speech = False  # the buffer holds speech (an utterance is open)
        self._silence_run = 0  # samples of non-speech since the last speech window
        self._asked = False  # this pause's end check was asked for (semantic turns)
        self._vad_pos = 0  # stream samples the probabilities have covered
        self._since_partial = 0
        self.partial = ""
        self.utterances: list[Utterance] = []
        self.vad_state: object = None  # the detector's own carry-over, kept by the replica

    # ------------------------------------------------------------------ audio in

    def touch(self) -> None:
        self.last_used = self._clock()

    def idle_s(self) -> float:
        return self._clock() - self.last_used

    def feed(self, samples: np.ndarray, probabilities: np.ndarray) -> FeedResult:
        """Append a chunk and the speech probabilities of the VAD windows it completed."""
        self.touch()
        result = FeedResult()
        self.buffer = np.concatenate([self.buffer, np.asarray(samples, np.float32)])
        self.received += len(samples)
        self._since_partial += len(samples)
        cfg = self.config
        for p in np.asarray(probabilities, np.float64):
            self._vad_pos += VAD_WINDOW
            if p >= cfg.threshold:
                if not self.speech:
                    self.speech = True
                    result.speech_started.append(max(self.start, self._vad_pos - VAD_WINDOW))
                self._silence_run, self._asked = 0, False
            elif p < cfg.neg_threshold and self.speech:
                self._silence_run += VAD_WINDOW
                ends = cfg.pause_s if cfg.max_pause_s is None else cfg.max_pause_s
                if cfg.auto_finalize and self._silence_run >= ends * RATE:
                    result.speech_stopped.append(self._vad_pos - self._silence_run)
                    result.cuts.append(self._cut(min(self._vad_pos, self.received)))
        if cfg.max_pause_s is not None and cfg.auto_finalize and self.speech and not self._asked:
            if self._silence_run >= cfg.pause_s * RATE:
                result.end_check, self._asked = True, True
        self._trim_silence()
        max_len = int(cfg.max_utterance_s * RATE)
        while len(self.buffer) >= max_len:
            result.cuts.append(self._cut(self.start + max_len, forced=True))
        result.partial_due = self.speech and not result.cuts and self._since_partial >= cfg.partial_every_s * RATE
        return result

    def commit(self) -> Optional[Cut]:
        """End the open utterance now (finish, or a Realtime commit); None if nothing is buffered."""
        self.touch()
        if len(self.buffer) == 0 or (self.config.auto_finalize and not self.speech):
            return None
        return self._cut(self.received)

    def end_turn(self) -> tuple[Cut, int]:
        """End the utterance at a semantic pause whose words sound finished: its cut, and where
        its speech stopped (stream samples)."""
        stopped = self._vad_pos - self._silence_run
        return self._cut(self.received), stopped

    def clear(self) -> None:
        """Drop the buffered audio (Realtime input_audio_buffer.clear)."""
        self.start, self.buffer = self.received, np.zeros(0, np.float32)
        self.speech, self._silence_run, self.partial = False, 0, ""

    def _cut(self, at: int, forced: bool = False) -> Cut:
        """Split the buffer at stream offset `at`: the part before is the utterance."""
        n = at - self.start
        cut = Cut(self.start, self.buffer[:n].copy(), forced)
        self.buffer = self.buffer[n:]
        self.start = at
        self._since_partial = len(self.buffer)
        self.partial = ""
        if not forced:  # a forced cut lands mid-speech: the next utterance goes on speaking
            self.speech, self._silence_run, self._asked = False, 0, False
        return cut

    def _trim_silence(self) -> None:
        """Before speech, keep only the pre-roll (the onset of the next word)."""
        keep = int(self.config.preroll_s * RATE)
        # Manual turns (Realtime, no server VAD) keep everything: the client decides.
        if self.config.auto_finalize and not self.speech and len(self.buffer) > keep:
            drop = len(self.buffer) - keep
            self.buffer = self.buffer[drop:]
            self.start += drop
            self._since_partial = min(self._since_partial, len(self.buffer))

    # ------------------------------------------------------------------ text out

    def finalised(self, cut: Cut, text: str, words: Optional[list[Word]] = None) -> None:
        """`words`: the utterance's word times (seconds within the utterance), for diarization."""
        text = text.strip()
        if text:
            offset = cut.start / RATE
            shifted = None if words is None else [Word(w.word, w.start + offset, w.end + offset) for w in words]
            self.utterances.append(Utterance(offset, cut.end / RATE, text, shifted))

    def partial_started(self) -> None:
        """A hypothesis of the buffer is being decoded: the next is due after as much new audio."""
        self._since_partial = 0

    def set_partial(self, text: str) -> None:
        self.partial = text.strip()

    @property
    def text(self) -> str:
        return " ".join(u.text for u in self.utterances)

    @property
    def buffer_s(self) -> float:
        return round(len(self.buffer) / RATE, 3)

    def state(self, utterance_final: bool = False, final: bool = False) -> dict:
        """MiniInfer's chunk answer (with `speakers` and each segment's `speaker` when diarized)."""
        answer = {
            "sid": self.sid,
            "text": self.text,
            "partial": self.partial,
            "buffer_s": self.buffer_s,
            "utterance_final": utterance_final,
            "final": final,
            "segments": self.segments(),
            "received_s": round(self.received / RATE, 3),
        }
        if self.speakers is not None:
            answer["speakers"] = len({s["speaker"] for s in answer["segments"]})
        return answer

    def segments(self) -> list[dict]:
        """One per utterance; diarized, an utterance's segments are timed by its words and cut
        where the speaker changes, and speakers are numbered 0, 1, ... in order of first
        appearance in them (the clustering of what was heard so far)."""
        if self.speakers is None:
            return [u.as_dict() for u in self.utterances]
        return [
            {"start": round(p.start, 3), "end": round(p.end, 3), "text": p.text.strip(), "speaker": p.speaker}
            for p in self._speaker_parts()
        ]

    def opening_speaker(self) -> int:
        """The (provisional) speaker who opens the latest utterance, numbered as in `segments`."""
        last = len(self.utterances) - 1
        return next((p.speaker for p in self._speaker_parts() if p.origin == last), 0) or 0

    def _speaker_parts(self) -> list[Segment]:
        decoded = [Segment(i, u.start, u.end, u.text, words=u.words) for i, u in enumerate(self.utterances)]
        return label_segments(decoded, self.speakers.speaker_of)[0] if self.speakers is not None else decoded

    def summary(self) -> dict:
        """One line of GET /v1/audio/stream/sessions."""
        return {
            "sid": self.sid,
            "model": self.model,
            "buffer_s": self.buffer_s,
            "received_s": round(self.received / RATE, 3),
            "segments": len(self.utterances),
            "idle_s": round(self.idle_s(), 1),
        }


def session_lost(sid: str) -> APIError:
    return APIError(
        410,
        f"Streaming session '{sid}' was lost: the ASR replica that held it is gone. Start a new session.",
        "invalid_request_error",
        "sid",
        "session_lost",
    )


def session_not_found(sid: str) -> APIError:
    return APIError(
        404,
        f"No streaming session '{sid}': it never existed, ended, or was reclaimed after being idle.",
        "invalid_request_error",
        "sid",
        "session_not_found",
    )


class SessionTable:
    """The live sessions of one replica: a cap, idle reclaim, and ids that name the replica
    (`make_sid(token)` is `replica_key(replica id, token)` in the deployment)."""

    def __init__(self, max_sessions: int, idle_timeout_s: float, make_sid: Callable[[str], str]):
        self.max_sessions = max_sessions
        self.idle_timeout_s = idle_timeout_s
        self._make_sid = make_sid
        self._sessions: dict[str, StreamSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[StreamSession]:
        return iter(list(self._sessions.values()))

    def create(
        self,
        model: Optional[str],
        config: StreamConfig,
        clock: Callable[[], float] = time.monotonic,
        speakers: Optional[SpeakerTrack] = None,
    ) -> StreamSession:
        self.reclaim()
        if len(self._sessions) >= self.max_sessions:
            raise APIError(
                429,
                f"Too many live streaming sessions on this replica ({self.max_sessions}); "
                "finish or delete one, or retry shortly.",
                "rate_limit_error",
                None,
                "too_many_sessions",
                headers={"Retry-After": "5"},
            )
        session = StreamSession(self._make_sid(secrets.token_urlsafe(12)), model, config, clock, speakers)
        self._sessions[session.sid] = session
        return session

    def get(self, sid: str) -> Optional[StreamSession]:
        self.reclaim()
        return self._sessions.get(sid)

    def remove(self, sid: str) -> Optional[StreamSession]:
        return self._sessions.pop(sid, None)

    def reclaim(self) -> list[str]:
        """End the sessions idle longer than the timeout; their ids."""
        gone = [sid for sid, s in self._sessions.items() if s.idle_s() > self.idle_timeout_s]
        for sid in gone:
            del self._sessions[sid]
        return gone
