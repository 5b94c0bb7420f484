"""G.711 μ-law and A-law against CPython's `audioop` (the CCITT reference code, in Python
3.11's standard library): every 16-bit sample encodes to the same byte, every byte decodes to
the same sample; speech survives a round trip at telephone quality."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from deployments.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop", reason="audioop left the standard library in Python 3.13")

EVERY_SAMPLE = np.arange(-32768, 32768, dtype=np.int16)
EVERY_BYTE = bytes(range(256))


@pytest.mark.parametrize(
    "encode, reference", [(ulaw_encode, audioop.lin2ulaw), (alaw_encode, audioop.lin2alaw)], ids=["ulaw", "alaw"]
)
def test_every_sample_encodes_as_the_reference_does(encode, reference):
    assert encode(EVERY_SAMPLE) == reference(EVERY_SAMPLE.tobytes(), 2)


@pytest.mark.parametrize(
    "decode, reference", [(ulaw_decode, audioop.ulaw2lin), (alaw_decode, audioop.alaw2lin)], ids=["ulaw", "alaw"]
)
def test_every_byte_decodes_as_the_reference_does(decode, reference):
    assert decode(EVERY_BYTE).tobytes() == reference(EVERY_BYTE, 2)


@pytest.mark.parametrize(
    "encode, decode", [(ulaw_encode, ulaw_decode), (alaw_encode, alaw_decode)], ids=["ulaw", "alaw"]
)
def test_a_tone_survives_a_round_trip(encode, decode):
    tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(8000) / 8000) * 32767).astype(np.int16)
    back = decode(encode(tone)).astype(np.float64)
    noise = back - tone
    assert 10 * np.log10(np.mean(tone.astype(np.float64) ** 2) / np.mean(noise**2)) > 30  # G.711's ~35-38 dB
