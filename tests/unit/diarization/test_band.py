"""Telling a telephone-band recording from a wideband one by its energy above 4.2 kHz
(deployments/diarization/band.py), and the lower threshold such a recording gets."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.audio.resample import resample
from deployments.diarization.band import high_band_share, narrowband
from deployments.diarization.config import DiarizationConfig
from tests.conversations import conversation
from tests.speech import speak

RATE = 16000


def test_a_phone_line_has_no_energy_above_4_khz():
    voice = speak("She sells sea shells by the sea shore, six sisters see the ships.")
    phone = resample(resample(voice, RATE, 8000), 8000, RATE)
    share = DiarizationConfig().narrowband_share
    assert high_band_share(voice, RATE) > 10 * share  # sibilants: energy up to 8 kHz
    assert narrowband(phone, RATE, share) and not narrowband(voice, RATE, share)
    assert not narrowband(np.zeros(RATE, np.float32), RATE, share)  # silence is no band at all


def test_the_real_call_is_narrowband_and_the_meetings_are_not():
    assert narrowband(conversation("sample").samples, RATE, DiarizationConfig().narrowband_share)
    assert not narrowband(conversation("dev00").samples, RATE, DiarizationConfig().narrowband_share)


def test_a_narrowband_recording_gets_a_lower_threshold():
    config = DiarizationConfig(threshold=0.3, narrowband_offset=0.05)
    assert config.for_narrowband().threshold == 0.25 and config.for_narrowband().window_s == config.window_s


def test_a_long_recording_is_measured_in_bounded_memory():
    """Ten minutes of noise (38 MB of float32): the share equals one pass over all the frames,
    and the work beside the samples stays within a few blocks (one pass took ~18x the samples
    in float64 and complex spectra: 2.2 GB for a 2 h recording)."""
    import tracemalloc

    from deployments.diarization import band

    rng = np.random.default_rng(0)
    samples = rng.standard_normal(600 * RATE).astype(np.float32) * np.float32(0.1)
    tracemalloc.start()
    try:
        share = high_band_share(samples, RATE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * band.BLOCK_FRAMES * band.FRAME * 8, f"{peak / 2**20:.0f} MB"
    frames = samples[: len(samples) // band.FRAME * band.FRAME].astype(np.float64).reshape(-1, band.FRAME)
    power = (np.abs(np.fft.rfft(frames * np.hanning(band.FRAME), axis=1)) ** 2).sum(axis=0)
    whole = power[np.fft.rfftfreq(band.FRAME, 1.0 / RATE) >= band.CUTOFF_HZ].sum() / power.sum()
    assert share == pytest.approx(whole, rel=1e-9)
