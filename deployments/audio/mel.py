"""Mel power spectrograms as librosa computes them (`librosa.feature.melspectrogram` defaults:
Hann window, centred frames with zero padding, power 2, Slaney mel scale and area norm), in
numpy, so models trained on librosa features get the same input without librosa.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

_F_SP = 200.0 / 3  # Slaney scale: linear below 1 kHz (66.7 Hz per mel), logarithmic above
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    log_part = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP
    return np.where(hz >= _MIN_LOG_HZ, log_part, hz / _F_SP)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    log_part = _MIN_LOG_HZ * np.exp(_LOGSTEP * (np.maximum(mel, _MIN_LOG_MEL) - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log_part, mel * _F_SP)


@lru_cache(maxsize=8)
def mel_filterbank(rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters from 0 Hz to rate / 2, each of unit area."""
    fft_hz = np.fft.rfftfreq(n_fft, 1.0 / rate)
    edges = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(rate / 2), n_mels + 2))
    rising = (fft_hz[None, :] - edges[:-2, None]) / np.diff(edges)[:-1, None]
    falling = (edges[2:, None] - fft_hz[None, :]) / np.diff(edges)[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def mel_power_spectrogram(samples: np.ndarray, rate: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """[frames, n_mels] mel power (not log) of `samples`; frame i is centred on sample i * hop."""
    padded = np.pad(np.asarray(samples, dtype=np.float32), n_fft // 2)
    n_frames = 1 + (len(padded) - n_fft) // hop
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop][:n_frames]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    return (power @ mel_filterbank(rate, n_fft, n_mels).T.astype(np.float64)).astype(np.float32)
