"""Energy-based voice activity detection: split long audio at pauses into decodable chunks.

Whisper-style models see at most 30 s at a time. Cutting blindly every 30 s splits words and
makes models repeat or drop text at the seams; cutting at pauses does not. Frames whose RMS
level is within `dynamic_range_db` of the loudest frame (and above an absolute floor) are
speech; speech regions closer than `min_silence_s` are joined; regions are then packed into
chunks of at most `max_chunk_s`, and a region longer than that is cut at its quietest frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VADConfig:
    frame_s: float = 0.03
    dynamic_range_db: float = 45.0  # speech is within this of the loudest frame
    floor_db: float = -60.0  # nothing quieter than this (dBFS) is speech
    min_silence_s: float = 0.3  # shorter pauses do not split speech
    pad_s: float = 0.2  # kept around each speech region, so onsets are not clipped
    max_chunk_s: float = 30.0


@dataclass(frozen=True)
class Chunk:
    """A span of the input, in samples: [start, end)."""

    start: int
    end: int

    def seconds(self, rate: int) -> tuple[float, float]:
        return self.start / rate, self.end / rate


def frame_levels_db(samples: np.ndarray, frame_len: int) -> np.ndarray:
    """RMS level in dBFS of each consecutive frame (the last one may be shorter)."""
    n_frames = -(-len(samples) // frame_len)
    padded = np.zeros(n_frames * frame_len, dtype=np.float32)
    padded[: len(samples)] = samples
    frames = padded.reshape(n_frames, frame_len)
    rms = np.sqrt(np.mean(frames.astype(np.float64) ** 2, axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-10))


def speech_regions(samples: np.ndarray, rate: int, config: VADConfig = VADConfig()) -> list[Chunk]:
    """Spans that hold speech, padded and with short pauses bridged, in order."""
    frame_len = max(1, int(rate * config.frame_s))
    if len(samples) == 0:
        return []
    levels = frame_levels_db(samples, frame_len)
    threshold = max(config.floor_db, levels.max() - config.dynamic_range_db)
    voiced = levels > threshold
    regions: list[list[int]] = []
    for i in np.flatnonzero(voiced):
        start, end = i * frame_len, min(len(samples), (i + 1) * frame_len)
        if regions and start - regions[-1][1] < config.min_silence_s * rate:
            regions[-1][1] = end
        else:
            regions.append([start, end])
    pad = int(config.pad_s * rate)
    return [Chunk(max(0, s - pad), min(len(samples), e + pad)) for s, e in regions]


def split_for_decoding(samples: np.ndarray, rate: int, config: VADConfig = VADConfig()) -> list[Chunk]:
    """Chunks of at most `max_chunk_s` that together cover every speech region."""
    return pack_for_decoding(samples, speech_regions(samples, rate, config), rate, config)


def pack_for_decoding(
    samples: np.ndarray, regions: list[Chunk], rate: int, config: VADConfig = VADConfig()
) -> list[Chunk]:
    """Speech regions (of any VAD) as chunks of at most `max_chunk_s` that cover them all."""
    max_len = int(config.max_chunk_s * rate)
    pieces: list[Chunk] = []
    for region in regions:
        pieces.extend(_cut_long(samples, region, rate, max_len, config))
    chunks: list[Chunk] = []
    for piece in pieces:
        # Pack neighbouring regions together: fewer, fuller windows decode faster.
        if chunks and piece.end - chunks[-1].start <= max_len:
            chunks[-1] = Chunk(chunks[-1].start, piece.end)
        else:
            chunks.append(piece)
    return chunks


def _cut_long(samples: np.ndarray, region: Chunk, rate: int, max_len: int, config: VADConfig) -> list[Chunk]:
    """Cut a region longer than `max_len` at its quietest frames (in the window's second half)."""
    out = []
    start = region.start
    frame_len = max(1, int(rate * config.frame_s))
    while region.end - start > max_len:
        lo, hi = start + max_len // 2, start + max_len
        levels = frame_levels_db(samples[lo:hi], frame_len)
        cut = lo + int(np.argmin(levels)) * frame_len + frame_len // 2
        cut = min(max(cut, lo + 1), hi)
        out.append(Chunk(start, cut))
        start = cut
    out.append(Chunk(start, region.end))
    return out


def spans_from_probabilities(
    probs: np.ndarray,
    n_samples: int,
    frame_len: int,
    rate: int,
    threshold: float = 0.5,
    neg_threshold: float | None = None,
    min_speech_s: float = 0.25,
    min_silence_s: float = 0.1,
    pad_s: float = 0.03,
) -> list[Chunk]:
    """Speech spans from per-frame speech probabilities (frame i covers samples i*frame_len...).

    The rule of silero-vad's `get_speech_timestamps` (without its max-duration cut; long spans
    are cut by `pack_for_decoding`): speech starts at a frame >= `threshold`, ends once frames
    stay below `neg_threshold` (hysteresis, default threshold - 0.15) for `min_silence_s`;
    spans not longer than `min_speech_s` are dropped; each span is padded by `pad_s`, and where
    two spans are closer than two pads the gap is split between them so they never overlap.
    """
    neg = max(threshold - 0.15, 0.01) if neg_threshold is None else neg_threshold
    min_speech, min_silence = rate * min_speech_s, rate * min_silence_s
    spans: list[list[int]] = []
    start = None
    silence_from = 0
    for i, p in enumerate(np.asarray(probs, dtype=np.float64)):
        pos = i * frame_len
        if p >= threshold:
            silence_from = 0
            if start is None:
                start = pos
        elif p < neg and start is not None:
            silence_from = silence_from or pos
            if pos - silence_from >= min_silence:
                if silence_from - start > min_speech:
                    spans.append([start, silence_from])
                start, silence_from = None, 0
    if start is not None and n_samples - start > min_speech:
        spans.append([start, n_samples])
    return _pad_spans(spans, int(rate * pad_s), n_samples)


def _pad_spans(spans: list[list[int]], pad: int, n_samples: int) -> list[Chunk]:
    """Pad each span by `pad`; a gap narrower than two pads is shared out half and half."""
    for i, span in enumerate(spans):
        if i == 0:
            span[0] = max(0, span[0] - pad)
        if i + 1 < len(spans):
            gap = spans[i + 1][0] - span[1]
            grow = gap // 2 if gap < 2 * pad else pad
            span[1] += grow
            spans[i + 1][0] = max(0, spans[i + 1][0] - grow)
        else:
            span[1] = min(n_samples, span[1] + pad)
    return [Chunk(s, e) for s, e in spans]
