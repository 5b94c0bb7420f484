"""Audio INPUT for voice cloning: read a reference recording (any container soundfile knows:
WAV, FLAC, OGG, MP3) into float32 mono at the model's rate.

Minimal on purpose: the ASR side owns general decoding (`deployments/audio/decode.py` on its
branch); merge this into it when both land. No Ray, no MLX.
"""

from __future__ import annotations

import io

import numpy as np

from deployments.audio.encode import resample
from deployments.protocol.b64 import decode_base64_field

MAX_REFERENCE_BYTES = 10 * 1024 * 1024  # OminiX-API's clone form limit
MIN_REFERENCE_SECONDS = 0.1
MAX_REFERENCE_SECONDS = 60.0


class BadReferenceAudio(ValueError):
    """The reference audio cannot be used; the message says why (shown to the client)."""


def decode_base64(data: str) -> bytes:
    """Base64 (optionally a `data:audio/...;base64,` URL, or wrapped in lines) -> bytes."""
    try:
        return decode_base64_field(data)
    except ValueError:
        raise BadReferenceAudio("reference_audio is not valid base64") from None


def read_reference(data: bytes, sample_rate: int) -> np.ndarray:
    """Encoded audio bytes -> float32 mono samples at `sample_rate`."""
    import soundfile as sf

    if len(data) > MAX_REFERENCE_BYTES:
        raise BadReferenceAudio(f"reference audio is larger than {MAX_REFERENCE_BYTES} bytes")
    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:
        raise BadReferenceAudio(f"reference audio could not be decoded ({e})") from None
    mono = samples.mean(axis=1)
    seconds = mono.size / rate
    if seconds < MIN_REFERENCE_SECONDS:
        raise BadReferenceAudio(f"reference audio is too short ({seconds:.2f} s; at least {MIN_REFERENCE_SECONDS} s)")
    if seconds > MAX_REFERENCE_SECONDS:
        raise BadReferenceAudio(f"reference audio is too long ({seconds:.1f} s; at most {MAX_REFERENCE_SECONDS:.0f} s)")
    return resample(mono, rate, sample_rate)
