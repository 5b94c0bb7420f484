"""Who spoke when in one recording: Silero VAD spans, sliding GE2E windows over them,
average-linkage clustering of the windows (at a lower threshold on a telephone band), each
moment's speaker voted by the windows that cover it, known speakers named by distance.

Windows shorter than `min_embed_s` (a span shorter than a window) embed unreliably: they are
left out of the clustering and join the nearest speaker afterwards. Long recordings: windows
are embedded in bounded batches, with progress in the log, and at most `max_clustered` of
them are clustered. No Ray; MLX through the two models.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np

from deployments.audio.mel import mel_power_spectrogram
from deployments.audio.resample import resample
from deployments.audio_models.silero_vad import SileroConfig, default_vad, speech_segments
from deployments.audio_models.speaker_encoder import HOP, N_FFT, N_MELS, default_encoder, normalize_volume
from deployments.diarization import clustering
from deployments.diarization.band import narrowband
from deployments.diarization.clustering import cluster
from deployments.diarization.config import DiarizationConfig, SpeakerCount
from deployments.diarization.spans import Diarization, Span, voted_turns, windows

logger = logging.getLogger(__name__)

RATE = 16000
FRAMES_PER_S = RATE // HOP  # the speaker encoder's mel frames per second
BATCH = 128  # windows per forward pass of the encoder (bounds its memory)
LOG_EVERY_S = 600.0  # a progress line per this much audio embedded


class Diarizer:
    """The VAD and the speaker encoder, loaded once per process."""

    def __init__(self):
        self.vad = default_vad()
        self.encoder = default_encoder()

    def embed(self, samples: np.ndarray, rate: int = RATE) -> np.ndarray:
        """One voice (a known speaker's reference clip) as a unit vector."""
        return self.encoder.embed_utterance(samples, rate)

    def speech(self, samples: np.ndarray, config: DiarizationConfig) -> list[Span]:
        """Silero's speech spans, on the samples raised to `vad_level_dbfs` if quieter (a far
        microphone's speech is otherwise taken for silence)."""
        vad = SileroConfig(threshold=config.vad_threshold, min_silence_s=config.min_silence_s)
        level = normalize_volume(samples, config.vad_level_dbfs)
        return [Span(s, e) for s, e in speech_segments(level, RATE, vad)]

    def pieces(self, samples: np.ndarray, config: DiarizationConfig) -> list[Span]:
        """Sliding windows over the speech. Not cut at the transcript's segment ends: measured
        on the telephone call of tests/conversations.py, cutting there leaves short pieces
        that cluster apart (4 speakers found of 2, DER 0.20 instead of 0.07)."""
        return windows(self.speech(samples, config), config.window_s, config.hop_s)

    def diarize(
        self,
        samples: np.ndarray,
        rate: int = RATE,
        config: DiarizationConfig = DiarizationConfig(),
        *,
        count: SpeakerCount = SpeakerCount(),
        known: Mapping[str, np.ndarray] | None = None,
    ) -> Diarization:
        """Diarize mono `samples`."""
        if rate != RATE:
            samples = resample(samples, rate, RATE)
        duration = len(samples) / RATE
        if narrowband(samples, RATE, config.narrowband_share):
            config = config.for_narrowband()
        pieces, embeddings = self.voice_pieces(samples, config)
        if not pieces:
            return Diarization([], [], duration, frozenset(known or ()))
        weights = [p.duration for p in pieces]
        labels = cluster(embeddings, weights, config, count)
        names = clustering.name_speakers(
            clustering.centroids(embeddings, labels, weights), known or {}, config.known_max_distance
        )
        found = voted_turns(pieces, labels, config.frame_s, config.join_gap_s)
        return Diarization(found, names, duration, frozenset(known or ())).voiced()

    def voice_pieces(self, samples: np.ndarray, config: DiarizationConfig) -> tuple[list[Span], np.ndarray]:
        """The pieces of 16 kHz `samples` worth an embedding, and their embeddings ([n, 256])."""
        pieces = self.pieces(samples, config)
        if not pieces:
            return [], np.zeros((0, 0), np.float32)
        return pieces, self.embed_pieces(samples, pieces)

    def embed_pieces(self, samples: np.ndarray, pieces: Sequence[Span]) -> np.ndarray:
        """Each piece's voice, embedded over its own mel frames (no padding to the 1.6 s partial
        resemblyzer pads to: a short window would embed silence too), pieces of one length
        batched together. At most `BATCH` pieces' frames wait at a time, whatever the length of
        the recording."""
        out = np.zeros((len(pieces), 256), np.float32)
        waiting: dict[int, list[tuple[int, np.ndarray]]] = {}  # by length in frames

        def flush(length: int) -> None:
            batch = waiting.pop(length)
            out[[i for i, _ in batch]] = self.encoder.embed_partials(np.stack([mel for _, mel in batch]))

        logged = 0.0
        for i, piece in enumerate(pieces):
            clip = normalize_volume(samples[int(piece.start * RATE) : int(piece.end * RATE)])
            frames = max(1, int(piece.duration * FRAMES_PER_S))
            mel = mel_power_spectrogram(clip, RATE, N_FFT, HOP, N_MELS)[:frames]
            waiting.setdefault(len(mel), []).append((i, mel))
            if sum(len(b) for b in waiting.values()) >= BATCH:
                flush(max(waiting, key=lambda k: len(waiting[k])))
            if piece.end - logged >= LOG_EVERY_S:
                logger.info("Diarization: %.0f s of %.0f s of audio windowed", piece.end, pieces[-1].end)
                logged = piece.end
        for length in list(waiting):
            flush(length)
        return out
