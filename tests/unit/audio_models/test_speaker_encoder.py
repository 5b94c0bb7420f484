"""resemblyzer's GE2E speaker encoder in MLX (deployments/audio_models/speaker_encoder.py), its
torch-free weight reader and its librosa-style mel front end."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import lfilter

from deployments.audio.mel import mel_filterbank, mel_power_spectrogram
from deployments.audio_models import package_file, torch_legacy
from deployments.audio_models.speaker_encoder import (
    PACKAGE,
    WEIGHTS_FILE,
    default_encoder,
    embed_utterance,
    normalize_volume,
    partial_starts,
    rms_level,
)
from deployments.similarity import cosine
from tests.speech import silence, speak

RATE = 16000
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "resemblyzer_vowels_embedding.npy"
SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please call Stella and ask her to bring these things with her from the store.",
]
# espeak-ng voice variants of one formant synthesizer: male and female ones are told apart
# (measured 0.55-0.59 across, 0.87-0.93 within), variants of one sex much less (issue 20).
MALE, FEMALE = "en-us+m3", "en+f4"


def vowels(seconds_each: float = 0.6, rate: int = RATE) -> np.ndarray:
    """A fixed voice-like clip made with numpy alone (no espeak-ng version in the loop): five
    vowels from a gliding 110-140 Hz pulse train through three formant resonators each."""
    formants = [(730, 1090, 2440), (270, 2290, 3010), (300, 870, 2240), (530, 1840, 2480), (570, 840, 2410)]
    out = []
    for i, freqs in enumerate(formants):
        n = int(seconds_each * rate)
        f0 = np.linspace(110 + 6 * i, 140 - 4 * i, n)
        source = np.diff(np.floor(np.cumsum(f0) / rate), prepend=0.0)  # one pulse per period
        for f in freqs:  # a two-pole resonator per formant, 80 Hz wide
            r = np.exp(-np.pi * 80 / rate)
            source = lfilter([1 - r], [1, -2 * r * np.cos(2 * np.pi * f / rate), r * r], source)
        envelope = np.sin(np.linspace(0, np.pi, n)) ** 0.5
        out += [source * envelope, np.zeros(int(0.1 * rate))]
    clip = np.concatenate(out)
    return (0.3 * clip / np.abs(clip).max()).astype(np.float32)


@pytest.fixture(scope="module")
def voices() -> dict[tuple[str, int], np.ndarray]:
    """Embeddings of each sentence in each voice."""
    return {(v, i): embed_utterance(speak(s, voice=v), RATE) for v in (MALE, FEMALE) for i, s in enumerate(SENTENCES)}


def test_same_voice_is_closer_than_another_voice(voices):
    for voice, other in ((MALE, FEMALE), (FEMALE, MALE)):
        same = cosine(voices[voice, 0], voices[voice, 1])  # different sentences
        across = max(cosine(voices[voice, i], voices[other, j]) for i in range(2) for j in range(2))
        assert same > across + 0.1, (voice, same, across)


def test_embeddings_are_unit_vectors_and_deterministic(voices):
    for e in voices.values():
        assert e.shape == (256,) and e.dtype == np.float32
        assert abs(np.linalg.norm(e) - 1) < 1e-5
        assert (e >= 0).all()  # after the ReLU, as in resemblyzer
    clip = speak(SENTENCES[0], voice=MALE)
    np.testing.assert_array_equal(embed_utterance(clip, RATE), embed_utterance(clip, RATE))


def test_matches_resemblyzer_on_a_fixed_clip():
    """The fixture was computed once by resemblyzer 0.1.4's own VoiceEncoder (torch, librosa):
    `encoder.embed_utterance(preprocess.normalize_volume(vowels(), -30, increase_only=True))`."""
    np.testing.assert_allclose(embed_utterance(vowels(), RATE), np.load(FIXTURE), atol=1e-4)


def test_other_sample_rates_are_resampled():
    clip = speak(SENTENCES[1], rate=24000, voice=FEMALE)
    at_16k = embed_utterance(speak(SENTENCES[1], voice=FEMALE), RATE)
    assert cosine(embed_utterance(clip, 24000), at_16k) > 0.99


def test_short_and_empty_clips():
    short = speak("Yes.")
    assert len(partial_starts(len(short))) == 1  # shorter than one 1.6 s partial: padded
    assert abs(np.linalg.norm(embed_utterance(short, RATE)) - 1) < 1e-5
    with pytest.raises(ValueError, match="empty"):
        embed_utterance(np.zeros(0, np.float32), RATE)


def resemblyzer_partial_slices():
    """resemblyzer's own `VoiceEncoder.compute_partial_slices`, taken from the package's source
    with its hparams (the module imports torch, which is not installed; the function needs none)."""
    namespace = {"np": np}
    exec(package_file(PACKAGE, "resemblyzer/hparams.py").read_text(), namespace)
    tree = ast.parse(package_file(PACKAGE, "resemblyzer/voice_encoder.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "VoiceEncoder")
    func = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "compute_partial_slices")
    func.decorator_list = []
    exec(compile(ast.Module(body=[func], type_ignores=[]), "voice_encoder.py", "exec"), namespace)
    return namespace["compute_partial_slices"]


@pytest.mark.parametrize("rate", [0.7, 1.3, 4.0])
def test_partials_cover_the_clip_like_resemblyzer(rate):
    reference = resemblyzer_partial_slices()
    for n_samples in [1, 800, 16000, 25600, 28800, 32000, 46400, 80000, 123457]:
        _, mel_slices = reference(n_samples, rate, 0.75)
        assert partial_starts(n_samples, rate) == [s.start for s in mel_slices], n_samples
    assert partial_starts(int(1.8 * RATE)) == [0]  # a last partial 64 % full is dropped


def test_volume_is_raised_never_lowered():
    quiet = 0.001 * speak("Quiet.")
    raised = normalize_volume(quiet)
    assert abs(20 * np.log10(np.sqrt(np.mean(raised.astype(np.float64) ** 2))) + 30) < 0.01
    loud = 0.9 * np.sign(quiet)
    assert normalize_volume(loud) is loud
    assert normalize_volume(silence(1.0)).max() == 0


def test_mel_front_end_matches_an_fft_of_one_frame():
    t = np.arange(4000) / RATE
    tone = np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    mel = mel_power_spectrogram(tone, RATE, 400, 160, 40)
    assert mel.shape == (1 + len(tone) // 160, 40)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    frame = tone[10 * 160 - 200 : 10 * 160 + 200]  # frame 10 is centred on sample 1600
    expected = mel_filterbank(RATE, 400, 40) @ (np.abs(np.fft.rfft(frame * window)) ** 2)
    np.testing.assert_allclose(mel[10], expected, rtol=1e-4)
    assert np.argmax(mel[10]) == np.argmax(mel_filterbank(RATE, 400, 40)[:, 25])  # 1000 Hz = bin 25


def test_mel_filterbank_matches_mlx_audio():
    from mlx_audio.utils import mel_filters

    ref = mel_filters(sample_rate=RATE, n_fft=400, n_mels=40, f_min=0, f_max=8000, norm="slaney", mel_scale="slaney")
    np.testing.assert_allclose(mel_filterbank(RATE, 400, 40), np.array(ref), atol=1e-7)


def test_torch_file_reads_every_tensor():
    state = torch_legacy.load(package_file(PACKAGE, WEIGHTS_FILE))["model_state"]
    assert state["lstm.weight_ih_l0"].shape == (1024, 40)
    assert state["lstm.weight_hh_l2"].shape == (1024, 256)
    assert state["linear.weight"].shape == (256, 256) and state["linear.weight"].dtype == np.float32
    assert all(np.isfinite(v).all() and v.std() > 0 for k, v in state.items() if v.size > 1)
    assert default_encoder() is default_encoder()


def test_torch_file_refuses_code(tmp_path):
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        for header in (torch_legacy.MAGIC, 1001, {}):
            pickle.dump(header, f)
        pickle.dump(__import__("os").system, f)  # a global outside the allowed set
    with pytest.raises(torch_legacy.TorchFileError, match="posix.system|os.system"):
        torch_legacy.load(path)
    path.write_bytes(pickle.dumps({"zip": "format"}))
    with pytest.raises(torch_legacy.TorchFileError, match="not a legacy torch file"):
        torch_legacy.load(path)


def test_the_level_of_a_long_recording_is_measured_in_bounded_memory():
    """Ten minutes (38 MB of float32): the RMS of one float64 pass, without a float64 copy."""
    import tracemalloc

    rng = np.random.default_rng(0)
    samples = rng.standard_normal(600 * RATE).astype(np.float32) * np.float32(0.1)
    tracemalloc.start()
    try:
        level = rms_level(samples)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MB"
    assert level == pytest.approx(float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))), rel=1e-12)
    assert rms_level(np.zeros(0, np.float32)) == 0.0
