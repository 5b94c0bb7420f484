"""deployments/audio: decoding (soundfile and ffmpeg), resampling, VAD segmentation."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.audio.decode import AudioDecodeError, decode_audio, to_mono
from deployments.audio.resample import resample
from deployments.audio.vad import VADConfig, speech_regions, split_for_decoding
from tests.speech import encode, silence


def tone(seconds: float, rate: int = 16000, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "mp3", "m4a", "webm"])
def test_decode_formats_to_mono_16k(fmt):
    samples = tone(1.0, 48000)
    out = decode_audio(encode(samples, 48000, fmt), 16000)
    assert out.dtype == np.float32 and out.ndim == 1
    assert abs(len(out) - 16000) < 1600  # lossy codecs pad a little
    # the tone survives: its dominant frequency is still 440 Hz
    spectrum = np.abs(np.fft.rfft(out[:16000] if len(out) >= 16000 else out))
    peak_hz = np.argmax(spectrum) * 16000 / (2 * (len(spectrum) - 1))
    assert abs(peak_hz - 440) < 10


def test_m4a_with_its_index_at_the_end_needs_the_seekable_memfd_path(tmp_path, monkeypatch):
    """ffmpeg cannot read a long plain m4a (moov after mdat) from a pipe; from a memfd it can."""
    import subprocess

    from deployments.audio import decode as decode_module

    dst = tmp_path / "long.m4a"
    subprocess.run(
        [
            "ffmpeg",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "sine=frequency=440:duration=120",
            "-c:a",
            "aac",
            str(dst),
        ],
        check=True,
    )
    data = dst.read_bytes()
    out = decode_audio(data, 16000)
    assert abs(len(out) - 120 * 16000) < 16000
    monkeypatch.setattr(decode_module, "_memfd_with", lambda data: None)  # the non-Linux stdin path
    with pytest.raises(AudioDecodeError, match="ffmpeg"):
        decode_audio(data, 16000)
    # streamable containers do work through stdin
    assert len(decode_audio(encode(tone(1.0), 16000, "webm"), 16000)) > 15000


def test_stereo_is_downmixed():
    stereo = np.stack([np.ones(10, np.float32), -np.ones(10, np.float32) * 0.5], axis=1)
    assert np.allclose(to_mono(stereo), 0.25)


@pytest.mark.parametrize("data, message", [(b"", "empty"), (b"not audio at all" * 10, "could not be decoded")])
def test_undecodable_audio_says_so(data, message):
    with pytest.raises(AudioDecodeError, match=message):
        decode_audio(data, 16000)


def test_without_ffmpeg_the_error_names_it():
    with pytest.raises(AudioDecodeError, match="ffmpeg"):
        decode_audio(b"\x00\x01garbage" * 100, 16000, ffmpeg=None)


def test_resample_keeps_duration_and_frequency():
    out = resample(tone(2.0, 44100, 1000), 44100, 16000)
    assert len(out) == 32000
    spectrum = np.abs(np.fft.rfft(out))
    assert abs(np.argmax(spectrum) * 16000 / (2 * (len(spectrum) - 1)) - 1000) < 5
    assert resample(out, 16000, 16000) is out


def test_vad_finds_speech_between_pauses():
    rate = 16000
    audio = np.concatenate([silence(1), tone(2), silence(1), tone(1), silence(2)])
    regions = [c.seconds(rate) for c in speech_regions(audio, rate)]
    assert len(regions) == 2
    (s1, e1), (s2, e2) = regions
    assert s1 == pytest.approx(1.0, abs=0.25) and e1 == pytest.approx(3.0, abs=0.25)
    assert s2 == pytest.approx(4.0, abs=0.25) and e2 == pytest.approx(5.0, abs=0.25)


def test_vad_silence_has_no_chunks():
    assert split_for_decoding(silence(3), 16000) == []
    assert split_for_decoding(np.zeros(0, np.float32), 16000) == []


def test_chunks_pack_regions_up_to_the_limit_and_cut_long_speech_at_a_pause():
    rate = 1000  # a low rate keeps the arrays small; the logic is rate-independent
    config = VADConfig(max_chunk_s=30.0)
    # 12 utterances of 4 s separated by 1 s pauses: 59 s in all
    parts = []
    for _ in range(12):
        parts += [tone(4, rate, 100), silence(1, rate)]
    audio = np.concatenate(parts)
    chunks = split_for_decoding(audio, rate, config)
    assert len(chunks) >= 2
    assert all(c.end - c.start <= 30 * rate for c in chunks)
    assert chunks == sorted(chunks, key=lambda c: c.start)
    # every utterance is inside exactly one chunk: no speech dropped, none cut
    for k in range(12):
        start, end = k * 5 * rate, k * 5 * rate + 4 * rate
        assert sum(c.start <= start and end <= c.end for c in chunks) == 1
    # one 70 s stretch of speech with a quiet dip at 25 s is cut, at most 30 s apiece
    long = tone(70, rate, 100)
    long[25 * rate : 25 * rate + 50] *= 0.01
    cut = split_for_decoding(long, rate, config)
    assert all(c.end - c.start <= 30 * rate for c in cut)
    assert cut[0].end == pytest.approx(25 * rate, abs=100)
    assert cut[0].start == 0 and cut[-1].end == len(long)


def test_an_mp3_without_its_info_frame_is_read_whole():
    """libsndfile sizes an MP3 by its first frame when no Xing/Info frame says the length: a VBR
    stream's recording, or a cut file, came back 0.58 s long of 6 s. ffmpeg reads it whole."""
    rate = 24000
    t = np.arange(6 * rate) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(t)) / 2).astype(np.float32)
    whole = encode(tone, rate, "mp3")
    assert b"Xing" in whole[:64]  # libsndfile's VBR info frame, first
    cut = whole[whole.index(b"\xff\xf3", 4) :]  # from the first audio frame on
    for data in (whole, cut):
        assert decode_audio(data, 16000).size / 16000 == pytest.approx(6.0, abs=0.15)
