"""Whether a recording went through a telephone band (8 kHz sampling: nothing above 4 kHz).
Pure numpy.

GE2E was trained on wideband speech; band-limited voices come out closer together, so the
diarization threshold that keeps two wideband voices apart merges them on a phone line
(measured in docs/api/diarization.md: an AMI excerpt's two speakers through an 8 kHz band are
one at 0.28, two at 0.26). Measured above 4.2 kHz (above the 4 kHz band edge, clear of the
resampler's transition): a real call upsampled to 16 kHz keeps ~1e-6 of its energy there, a
meeting or espeak's speech through an 8 kHz band at most 7e-5, wideband rooms and voices 9e-4
to 6e-2.
"""

from __future__ import annotations

import numpy as np

FRAME = 512
CUTOFF_HZ = 4200.0
BLOCK_FRAMES = 2048  # frames transformed at a time: ~1 M samples, ~12 MB of float64 work


def high_band_share(samples: np.ndarray, rate: int) -> float:
    """The share of the spectral energy above 4.2 kHz (Hann-windowed frames of 512 samples).
    In blocks of frames: one pass over a 2 h recording in float64 took 2.2 GB beside its samples."""
    n = len(samples) // FRAME * FRAME
    if n == 0:
        return 0.0
    window = np.hanning(FRAME)
    power = np.zeros(FRAME // 2 + 1)
    for start in range(0, n, BLOCK_FRAMES * FRAME):
        block = samples[start : min(n, start + BLOCK_FRAMES * FRAME)]
        frames = np.asarray(block, dtype=np.float64).reshape(-1, FRAME) * window
        power += (np.abs(np.fft.rfft(frames, axis=1)) ** 2).sum(axis=0)
    high = power[np.fft.rfftfreq(FRAME, 1.0 / rate) >= CUTOFF_HZ].sum()
    return float(high / power.sum()) if power.sum() > 0 else 0.0


def narrowband(samples: np.ndarray, rate: int, max_share: float) -> bool:
    """True when at most `max_share` of the energy lies above 4.2 kHz (and there is any)."""
    return 0.0 < high_band_share(samples, rate) <= max_share
