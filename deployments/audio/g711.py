"""G.711 μ-law and A-law (8 kHz telephone audio, one byte a sample: OpenAI Realtime's
`audio/pcmu` and `audio/pcma`, what Twilio and SIP trunks carry) to and from PCM16, in numpy.

The segment search and rounding are the CCITT reference code's (Sun Microsystems' g711.c, the
one CPython's `audioop` used), so the bytes match `audioop.lin2ulaw` / `lin2alaw` exactly
(tests/unit/audio/test_g711.py). Ray-free and MLX-free.
"""

from __future__ import annotations

import numpy as np

_ULAW_SEG_END = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_ULAW_BIAS = 0x84
_ULAW_CLIP = 8159  # the largest 14-bit magnitude


def ulaw_encode(pcm16: np.ndarray) -> bytes:
    """PCM16 samples as μ-law bytes."""
    value = pcm16.astype(np.int32) >> 2  # 14 bits
    mask = np.where(value < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(value), _ULAW_CLIP) + (_ULAW_BIAS >> 2)
    segment = np.searchsorted(_ULAW_SEG_END, magnitude, side="left")
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> (np.minimum(segment, 7) + 1)) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8).tobytes()


def ulaw_decode(data: bytes) -> np.ndarray:
    """μ-law bytes as PCM16 samples."""
    u = ~np.frombuffer(data, np.uint8).astype(np.int32) & 0xFF
    t = (((u & 0xF) << 3) + _ULAW_BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _ULAW_BIAS - t, t - _ULAW_BIAS).astype(np.int16)


def alaw_encode(pcm16: np.ndarray) -> bytes:
    """PCM16 samples as A-law bytes."""
    value = pcm16.astype(np.int32) >> 3  # 13 bits
    negative = value < 0
    mask = np.where(negative, 0x55, 0xD5)
    magnitude = np.where(negative, -value - 1, value)
    segment = np.searchsorted(_ALAW_SEG_END, magnitude, side="left")
    shift = np.where(segment < 2, 1, np.minimum(segment, 7))
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> shift) & 0xF)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8).tobytes()


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes as PCM16 samples."""
    a = np.frombuffer(data, np.uint8).astype(np.int32) ^ 0x55
    segment = (a & 0x70) >> 4
    t = (a & 0xF) << 4
    t = np.where(segment == 0, t + 8, (t + 0x108) << np.maximum(segment - 1, 0))
    return np.where(a & 0x80, t, -t).astype(np.int16)
