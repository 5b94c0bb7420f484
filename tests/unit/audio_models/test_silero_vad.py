"""Silero VAD in MLX (deployments/audio_models/silero_vad.py) against the package's own ONNX in
onnxruntime, and its speech spans against the package's own rule (get_speech_timestamps)."""

from __future__ import annotations

import ast
from collections.abc import Callable

import numpy as np
import onnxruntime
import pytest

from deployments.audio.vad import spans_from_probabilities
from deployments.audio_models import package_file
from deployments.audio_models.silero_vad import (
    ONNX_FILE,
    PACKAGE,
    SileroConfig,
    SileroVAD,
    default_vad,
    speech_regions,
    speech_segments,
    split_for_decoding,
    windows,
)
from deployments.hub import ModelUnavailable
from tests.speech import silence, speak

RATE = 16000
UTTERANCES = ["Good morning, everybody.", "The meeting starts at nine o'clock.", "Thank you."]


def noise(seconds: float, amp: float, seed: int = 0) -> np.ndarray:
    return (amp * np.random.default_rng(seed).standard_normal(int(seconds * RATE))).astype(np.float32)


def with_noise(samples: np.ndarray, amp: float) -> np.ndarray:
    return samples + noise(len(samples) / RATE, amp)[: len(samples)]


@pytest.fixture(scope="module")
def vad() -> SileroVAD:
    return default_vad()


@pytest.fixture(scope="module")
def dialogue() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Three utterances with 1 s pauses, and where each one's voiced samples lie (seconds)."""
    parts, truth, t = [silence(0.8)], [], 0.8
    for text in UTTERANCES:
        speech = speak(text)
        voiced = np.flatnonzero(np.abs(speech) > 0.01)
        truth.append((t + voiced[0] / RATE, t + voiced[-1] / RATE))
        parts += [speech, silence(1.0)]
        t += (len(speech) + RATE) / RATE
    return np.concatenate(parts), truth


def onnxruntime_probabilities(samples: np.ndarray) -> np.ndarray:
    """The package's ONNX run window by window, as silero-vad's OnnxWrapper runs it."""
    session = onnxruntime.InferenceSession(str(package_file(PACKAGE, ONNX_FILE)), providers=["CPUExecutionProvider"])
    state, out = np.zeros((2, 1, 128), np.float32), []
    for window in windows(samples):
        prob, state = session.run(None, {"input": window[None], "state": state, "sr": np.array(RATE, np.int64)})
        out.append(prob[0, 0])
    return np.array(out)


CLIPS = {
    "speech": lambda: np.concatenate([silence(0.3), speak("Voice activity detection finds speech."), silence(0.5)]),
    "silence": lambda: silence(2.0),
    "noise": lambda: noise(2.0, 0.05),
    "speech in noise": lambda: with_noise(speak("Speech under background noise."), 0.02),
    "ragged length": lambda: speak("Seven.")[:12345],
}


@pytest.mark.parametrize("clip", CLIPS)
def test_probabilities_match_onnxruntime(vad, clip):
    samples = CLIPS[clip]().astype(np.float32)
    ours = vad.probabilities(samples)
    reference = onnxruntime_probabilities(samples)
    assert ours.shape == (-(-len(samples) // 512),)
    np.testing.assert_allclose(ours, reference, atol=1e-5, rtol=0)


def test_a_long_recording_is_run_in_blocks_with_the_same_probabilities(vad, monkeypatch):
    from deployments.audio_models import silero_vad

    samples = CLIPS["speech in noise"]().astype(np.float32)
    whole = vad.probabilities(samples)
    monkeypatch.setattr(silero_vad, "BLOCK_WINDOWS", 7)  # blocks of 7 windows, the last ragged
    np.testing.assert_allclose(vad.probabilities(samples), whole, atol=1e-6, rtol=0)
    np.testing.assert_allclose(whole, onnxruntime_probabilities(samples), atol=1e-5, rtol=0)


def test_speech_is_told_from_silence_and_noise(vad):
    assert vad.probabilities(speak("This is clearly speech.")).max() > 0.9
    assert vad.probabilities(silence(1.0)).max() < 0.1
    assert vad.probabilities(noise(1.0, 0.05)).max() < 0.5


def test_segments_find_each_utterance(dialogue):
    samples, truth = dialogue
    segments = speech_segments(samples, RATE, SileroConfig(min_silence_s=0.3))
    assert len(segments) == len(UTTERANCES), segments
    for (start, end), (t0, t1) in zip(segments, truth, strict=True):
        assert start <= t0 + 0.1 and end >= t1 - 0.1, (start, end, t0, t1)  # the utterance is inside
        assert t0 - start < 0.4 and end - t1 < 0.4, (start, end, t0, t1)  # and not much more


def test_short_pauses_split_only_above_min_silence(dialogue):
    samples, _ = dialogue
    fine = speech_segments(samples, RATE, SileroConfig(min_silence_s=0.05))
    merged = speech_segments(samples, RATE, SileroConfig(min_silence_s=1.5))
    assert len(fine) > len(UTTERANCES)  # the commas and word gaps
    assert len(merged) == 1


def test_silence_and_noise_have_no_segments():
    assert speech_segments(silence(3.0)) == []
    assert speech_segments(noise(3.0, 0.03)) == []
    assert speech_segments(np.zeros(0, np.float32)) == []


def test_other_sample_rates_give_the_same_spans_in_their_own_samples():
    text = "Resampling keeps the timing."
    at_16k = speech_segments(np.concatenate([silence(0.5), speak(text)]), 16000)
    samples_24k = np.concatenate([silence(0.5, 24000), speak(text, 24000)])
    regions = speech_regions(samples_24k, 24000)
    assert len(regions) == len(at_16k)
    for region, (start, end) in zip(regions, at_16k, strict=True):
        assert abs(region.start / 24000 - start) < 0.04 and abs(region.end / 24000 - end) < 0.04
    assert regions[-1].end <= len(samples_24k)


def test_split_for_decoding_packs_and_caps_chunks(dialogue):
    samples, truth = dialogue
    chunks = split_for_decoding(samples, RATE, SileroConfig(max_chunk_s=2.5))
    assert all(c.end - c.start <= 2.5 * RATE for c in chunks)
    covered = np.zeros(len(samples), dtype=bool)
    for c in chunks:
        covered[c.start : c.end] = True
    for t0, t1 in truth:  # every voiced sample is in some chunk
        assert covered[int(t0 * RATE) : int(t1 * RATE)].all()
    assert len(split_for_decoding(samples, RATE)) == 1  # everything fits one 30 s window


def package_rule() -> Callable:
    """silero-vad's own `get_speech_timestamps_from_probs`, taken from the package's source
    (the module imports torch at the top, which is not installed; the function needs none)."""
    source = package_file(PACKAGE, "silero_vad/utils_vad.py").read_text()
    tree = ast.parse(source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_speech_timestamps_from_probs")
    namespace = {"List": list, "Callable": Callable}
    exec(compile(ast.Module(body=[func], type_ignores=[]), "utils_vad.py", "exec"), namespace)
    return namespace["get_speech_timestamps_from_probs"]


def random_probabilities(seed: int, n: int = 600) -> np.ndarray:
    """Runs of speech-like and silence-like frames with jitter around the thresholds."""
    rng = np.random.default_rng(seed)
    levels = np.repeat(rng.choice([0.05, 0.4, 0.9], size=n // 10), rng.integers(1, 20, size=n // 10))[:n]
    return np.clip(levels + rng.normal(0, 0.15, size=len(levels)), 0, 1)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("min_speech_ms", "min_silence_ms", "pad_ms"), [(250, 100, 30), (100, 300, 200), (0, 0, 0)])
def test_spans_follow_the_packages_rule(seed, min_speech_ms, min_silence_ms, pad_ms):
    probs = random_probabilities(seed)
    n_samples = len(probs) * 512 - 100
    expected = package_rule()(
        list(probs), min_speech_duration_ms=min_speech_ms, min_silence_duration_ms=min_silence_ms,
        speech_pad_ms=pad_ms, audio_length_samples=n_samples,
    )  # fmt: skip
    ours = spans_from_probabilities(
        probs, n_samples, 512, RATE, 0.5, None, min_speech_ms / 1000, min_silence_ms / 1000, pad_ms / 1000
    )
    assert [(c.start, c.end) for c in ours] == [(s["start"], s["end"]) for s in expected]
    assert expected  # the random runs do contain speech


def test_missing_package_names_it():
    with pytest.raises(ModelUnavailable, match="no-such-weights"):
        package_file("no-such-weights", "model.onnx")


def test_a_stream_fed_in_pieces_gets_the_whole_clips_probabilities(vad, dialogue):
    samples, _ = dialogue
    whole = vad.probabilities(samples)
    rng, state, got, pos = np.random.default_rng(1), None, [], 0
    while pos < len(samples):
        size = int(rng.integers(1, 4000))  # pieces smaller and larger than a window
        probs, state = vad.feed(samples[pos : pos + size], state)
        got.append(probs)
        pos += size
    streamed = np.concatenate(got)
    assert len(streamed) == len(samples) // 512  # the last, partial window is still pending
    assert len(state.pending) == len(samples) % 512
    np.testing.assert_allclose(streamed, whole[: len(streamed)], atol=1e-5)
