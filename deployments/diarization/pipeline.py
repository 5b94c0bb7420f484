"""Who spoke when in one recording: Silero VAD spans (cut at ASR segment ends and into windows),
a GE2E embedding per piece, agglomerative clustering, known speakers named by distance.

Pieces shorter than `min_embed_s` embed unreliably (a GE2E partial is 1.6 s): they are left out
of the clustering and join the nearest speaker afterwards. No Ray; MLX through the two models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from deployments.audio.resample import resample
from deployments.audio_models.silero_vad import SileroConfig, default_vad, speech_segments
from deployments.audio_models.speaker_encoder import default_encoder
from deployments.diarization import clustering
from deployments.diarization.clustering import cluster
from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.spans import Diarization, Span, cut_at, turns, windows

RATE = 16000


class Diarizer:
    """The VAD and the speaker encoder, loaded once per process."""

    def __init__(self):
        self.vad = default_vad()
        self.encoder = default_encoder()

    def embed(self, samples: np.ndarray, rate: int = RATE) -> np.ndarray:
        """One voice (a known speaker's reference clip) as a unit vector."""
        return self.encoder.embed_utterance(samples, rate)

    def pieces(self, samples: np.ndarray, config: DiarizationConfig, boundaries: Sequence[float] = ()) -> list[Span]:
        spans = [
            Span(s, e) for s, e in speech_segments(samples, RATE, SileroConfig(min_silence_s=config.min_silence_s))
        ]
        return windows(cut_at(spans, boundaries, config.min_embed_s), config.max_window_s)

    def diarize(
        self,
        samples: np.ndarray,
        rate: int = RATE,
        config: DiarizationConfig = DiarizationConfig(),
        *,
        count: SpeakerCount = SpeakerCount(),
        boundaries: Sequence[float] = (),
        known: Mapping[str, np.ndarray] | None = None,
    ) -> Diarization:
        """Diarize mono `samples`; `boundaries` are times (s) where a transcript segment ends."""
        if rate != RATE:
            samples = resample(samples, rate, RATE)
        duration = len(samples) / RATE
        pieces, embeddings = self.voice_pieces(samples, config, boundaries)
        if not pieces:
            return Diarization([], [], duration, frozenset(known or ()))
        weights = [p.duration for p in pieces]
        labels = cluster(embeddings, weights, config, count)
        names = clustering.name_speakers(
            clustering.centroids(embeddings, labels, weights), known or {}, config.known_max_distance
        )
        return Diarization(turns(pieces, labels, config.join_gap_s), names, duration, frozenset(known or ()))

    def voice_pieces(
        self, samples: np.ndarray, config: DiarizationConfig, boundaries: Sequence[float] = ()
    ) -> tuple[list[Span], np.ndarray]:
        """The pieces of 16 kHz `samples` worth an embedding, and their embeddings ([n, 192])."""
        pieces = self.pieces(samples, config, boundaries)
        if not pieces:
            return [], np.zeros((0, 0), np.float32)
        return pieces, self.embed_pieces(samples, pieces)

    def embed_pieces(self, samples: np.ndarray, pieces: Sequence[Span]) -> np.ndarray:
        return np.stack([self.embed(samples[int(p.start * RATE) : int(p.end * RATE)]) for p in pieces])
