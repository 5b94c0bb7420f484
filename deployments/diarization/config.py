"""The diarization settings (pure: the ASR slot's config imports them without MLX)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

SPEAKER_MODEL_ID = "resemblyzer-ge2e"  # the speaker-embedding model diarization runs

# Measured on the Kokoro dialogues (bench/diarization.py, docs/api/diarization.md).
DEFAULT_THRESHOLD = 0.25


@dataclass(frozen=True)
class DiarizationConfig:
    threshold: float = DEFAULT_THRESHOLD  # clusters farther apart (cosine distance) are different speakers
    known_max_distance: float = DEFAULT_THRESHOLD  # a cluster this close to a reference gets its name
    min_silence_s: float = 0.2  # VAD: shorter pauses do not split speech
    max_window_s: float = 3.0  # longer spans are embedded in windows of at most this
    min_embed_s: float = 0.6  # shorter pieces join the nearest speaker instead of clustering
    join_gap_s: float = 1.0  # one speaker's pieces this close form one turn


@dataclass(frozen=True)
class SpeakerCount:
    """What the caller knows about the number of speakers: exactly, or bounds, or nothing."""

    exactly: Optional[int] = None
    at_least: Optional[int] = None
    at_most: Optional[int] = None

    def target(self, found: int) -> Optional[int]:
        """The count to cluster to, given `found` by the threshold; None: keep the threshold's."""
        if self.exactly is not None:
            return self.exactly
        if self.at_least is not None and found < self.at_least:
            return self.at_least
        if self.at_most is not None and found > self.at_most:
            return self.at_most
        return None
