"""Spectral-gating denoiser for voice training's `denoising` stage (OminiX-API's `denoise: true`).

Stationary noise (fan, hiss, hum) is estimated per frequency from the clip itself and gated
out of its short-time spectrum:

1. STFT with a 32 ms Hann window every 8 ms;
2. the noise power of each frequency bin: a low percentile of that bin's power over time
   (speech comes and goes, so in every bin some frames hold only noise), scaled to a mean:
   a noise bin's power is exponentially distributed, its q-th percentile is -ln(1 - q) times
   its mean;
3. a soft gain per bin and frame, a Wiener-like `1 - over * noise / power` bounded below by
   a floor (full removal makes "musical noise": isolated surviving peaks), smoothed over
   neighbouring frames and bins for the same reason;
4. the inverse STFT by weighted overlap-add.

Speech well above the floor keeps a gain near 1, so clean speech is barely changed.
Pure numpy: no Ray, no MLX.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.032
HOP_FRACTION = 4  # hop = window / 4
NOISE_PERCENTILE = 10.0
OVER_SUBTRACTION = 2.0  # how far above the noise floor a bin must be to keep its gain
GAIN_FLOOR = 0.1  # -20 dB at most: deeper gating sounds watery
SMOOTH_FRAMES, SMOOTH_BINS = 3, 3


def _frames(samples: np.ndarray, n_fft: int, hop: int) -> tuple[np.ndarray, int]:
    padded = np.pad(samples, (n_fft, n_fft + hop))
    count = 1 + (len(padded) - n_fft) // hop
    return np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:count], count


def _smooth(gain: np.ndarray) -> np.ndarray:
    """Box average over SMOOTH_FRAMES x SMOOTH_BINS neighbours (edges replicated)."""
    pad_t, pad_f = SMOOTH_FRAMES // 2, SMOOTH_BINS // 2
    padded = np.pad(gain, ((pad_t, pad_t), (pad_f, pad_f)), mode="edge")
    out = np.zeros_like(gain)
    for dt in range(SMOOTH_FRAMES):
        for df in range(SMOOTH_BINS):
            out += padded[dt : dt + gain.shape[0], df : df + gain.shape[1]]
    return out / (SMOOTH_FRAMES * SMOOTH_BINS)


def denoise(samples: np.ndarray, rate: int) -> np.ndarray:
    """`samples` (mono float) with stationary noise gated out; same length and rate."""
    samples = np.asarray(samples, dtype=np.float32)
    n_fft = 1 << int(round(np.log2(WINDOW_S * rate)))
    hop = n_fft // HOP_FRACTION
    if len(samples) < n_fft:
        return samples.copy()
    window = np.hanning(n_fft + 1)[:-1].astype(np.float32)  # periodic Hann
    frames, count = _frames(samples, n_fft, hop)
    spectrum = np.fft.rfft(frames * window, axis=-1)
    power = np.abs(spectrum) ** 2 + 1e-12
    noise = np.percentile(power, NOISE_PERCENTILE, axis=0) / -np.log1p(-NOISE_PERCENTILE / 100)
    gain = np.clip(1.0 - OVER_SUBTRACTION * noise / power, GAIN_FLOOR, 1.0)
    cleaned = np.fft.irfft(spectrum * _smooth(gain), n=n_fft, axis=-1) * window
    # Weighted overlap-add: divide by the summed squared window (constant away from the ends).
    out = np.zeros(n_fft + (count - 1) * hop, dtype=np.float64)
    norm = np.zeros_like(out)
    for i in range(count):
        out[i * hop : i * hop + n_fft] += cleaned[i]
        norm[i * hop : i * hop + n_fft] += window**2
    out = out / np.maximum(norm, 1e-8)
    return out[n_fft : n_fft + len(samples)].astype(np.float32)
