"""The spectral-gating denoiser: noise goes, speech stays."""

import numpy as np
import pytest

from deployments.audio.denoise import denoise
from tests.speech import silence, speak

RATE = 16000


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    voice = speak("Please schedule the meeting for Tuesday afternoon, and bring the report.", RATE)
    # A pause on each side, as in a real recording: the denoiser learns the noise there too.
    return np.concatenate([silence(0.5, RATE), 0.5 * voice / np.abs(voice).max(), silence(0.5, RATE)])


def snr_db(clean: np.ndarray, estimate: np.ndarray) -> float:
    error = estimate - clean
    return 10 * np.log10(np.sum(clean**2) / np.sum(error**2))


@pytest.mark.parametrize("noise_snr_db", [0.0, 10.0])
def test_white_noise_is_reduced(speech, noise_snr_db):
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(len(speech)).astype(np.float32)
    noise *= np.sqrt(np.mean(speech**2) / np.mean(noise**2) / 10 ** (noise_snr_db / 10))
    noisy = speech + noise
    before, after = snr_db(speech, noisy), snr_db(speech, denoise(noisy, RATE))
    assert before == pytest.approx(noise_snr_db, abs=0.1)
    assert after > before + 4.0, (before, after)


def test_clean_speech_is_barely_changed(speech):
    cleaned = denoise(speech, RATE)
    assert cleaned.shape == speech.shape and cleaned.dtype == np.float32
    # The change is at least 25 dB under the speech (a noise floor of 0 leaves gains of 1).
    assert snr_db(speech, cleaned) > 25.0


def test_noise_only_is_attenuated():
    noise = np.random.default_rng(1).standard_normal(RATE).astype(np.float32) * 0.1
    out = denoise(noise, 24000)
    assert np.sqrt(np.mean(out**2)) < 0.5 * np.sqrt(np.mean(noise**2))


def test_shorter_than_a_window_is_returned_unchanged():
    short = np.ones(100, dtype=np.float32)
    assert np.array_equal(denoise(short, RATE), short)
