"""The diarization settings (pure: the ASR slot's config imports them without MLX)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

SPEAKER_MODEL_ID = "resemblyzer-ge2e"  # the speaker-embedding model diarization runs

# Measured on the real conversations of tests/conversations.py and the Kokoro dialogues
# (bench/diarization.py, docs/api/diarization.md): average linkage of 1.2 s windows.
DEFAULT_THRESHOLD = 0.28


@dataclass(frozen=True)
class DiarizationConfig:
    threshold: float = DEFAULT_THRESHOLD  # clusters farther apart (mean cosine distance) are different speakers
    narrowband_share: float = 2e-4  # at most this share of energy above 4.2 kHz: a telephone band ...
    narrowband_offset: float = 0.02  # ... where voices embed closer: the threshold is lowered by this
    known_max_distance: float = DEFAULT_THRESHOLD  # a cluster this close to a reference gets its name
    vad_threshold: float = 0.35  # Silero's speech probability; lower than its 0.5: far-field room speech
    vad_level_dbfs: float = -26.0  # quiet recordings are raised to this RMS level before the VAD
    min_silence_s: float = 0.2  # VAD: shorter pauses do not split speech
    window_s: float = 1.2  # speech is embedded in sliding windows this long ...
    hop_s: float = 0.3  # ... starting this far apart, so a change of voice is seen to this precision
    min_embed_s: float = 1.19  # shorter pieces (a span shorter than a window) join the nearest speaker
    min_speaker_share: float = 0.15  # a cluster with less of the clustered speech is a speaker only if ...
    distinct_voice: float = 0.265  # ... its voice is this far (cosine) from every mix of the bigger ones'
    max_clustered: int = 3000  # at most this many windows are clustered (memory: the square of it)
    frame_s: float = 0.05  # the resolution of the speaker of each moment (windows vote)
    # One speaker's speech this close forms one turn (pyannote's min_duration_off): reference
    # turns run through a speaker's pauses: at 0.3 s, 0.22 of dev00's speech was missed, at
    # 1.0 s 0.11; 1.0-1.5 s measure the same on every file (docs/api/diarization.md).
    join_gap_s: float = 1.0

    def for_narrowband(self) -> DiarizationConfig:
        """The settings for a telephone-band recording (deployments/diarization/band.py)."""
        return replace(self, threshold=self.threshold - self.narrowband_offset)


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
