"""Sample-rate conversion with a polyphase filter (scipy), exact for integer ratios."""

from __future__ import annotations

from math import gcd

import numpy as np


def resample(samples: np.ndarray, rate: int, target_rate: int) -> np.ndarray:
    """Resample mono float32 `samples` from `rate` to `target_rate` Hz."""
    if rate <= 0 or target_rate <= 0:
        raise ValueError(f"sample rates must be positive, got {rate} -> {target_rate}")
    samples = np.asarray(samples, dtype=np.float32)
    if rate == target_rate or samples.size == 0:
        return samples
    from scipy.signal import resample_poly

    g = gcd(rate, target_rate)
    # resample_poly applies an anti-aliasing low-pass filter when downsampling.
    return resample_poly(samples, target_rate // g, rate // g).astype(np.float32)
