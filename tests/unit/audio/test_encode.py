"""The audio encoder (every response format) and the reference-audio reader."""

import base64
import gc
import io
import shutil
import subprocess
import sys
import wave

import numpy as np
import pytest
import soundfile as sf

from deployments.audio import encode as enc
from deployments.audio.aac_stream import HELD_FRAMES, AacStream, adts_frame_length
from deployments.audio.reference import BadReferenceAudio, decode_base64, read_reference

RATE = 24000


def tone(seconds=0.5, rate=RATE, freq=440.0):
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_pcm16_clips_and_is_little_endian():
    pcm = enc.to_pcm16(np.array([0.0, 1.0, -1.0, 2.0, -2.0], np.float32))
    assert np.frombuffer(pcm, "<i2").tolist() == [0, 32767, -32767, 32767, -32767]


def test_wav_is_readable_with_exact_sizes():
    data = enc.encode(tone(), RATE, "wav")
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes()) == (RATE, 1, 2, RATE // 2)


@pytest.mark.parametrize("fmt,container", [("mp3", "MP3"), ("flac", "FLAC"), ("opus", "OGG")])
def test_soundfile_formats_round_trip(fmt, container):
    data = enc.encode(tone(), RATE, fmt)
    info = sf.info(io.BytesIO(data))
    assert info.format == container
    samples, _ = sf.read(io.BytesIO(data))
    assert abs(samples.size / info.samplerate - 0.5) < 0.1


def test_opus_at_an_unsupported_rate_is_resampled():
    data = enc.encode(tone(rate=22050), 22050, "opus")
    assert sf.info(io.BytesIO(data)).samplerate == 48000


def test_aac_depends_on_ffmpeg(monkeypatch):
    if shutil.which("ffmpeg"):
        assert enc.encode(tone(), RATE, "aac")[:2] == b"\xff\xf1"
    monkeypatch.setattr(enc.shutil, "which", lambda name: None)
    with pytest.raises(enc.UnsupportedFormat, match="ffmpeg"):
        enc.check_format("aac")


def test_unknown_format():
    with pytest.raises(enc.UnsupportedFormat, match="xyz"):
        enc.check_format("xyz")


def test_streaming_wav_header_then_pcm():
    encoder = enc.StreamEncoder("wav", RATE)
    audio = tone()
    parts = [encoder.feed(audio[:1000]), encoder.feed(audio[1000:]), encoder.finish()]
    assert parts[0][:4] == b"RIFF" and parts[0][40:44] == b"\xff\xff\xff\xff"
    assert parts[1] == enc.to_pcm16(audio[1000:]) and parts[2] == b""
    samples, rate = sf.read(io.BytesIO(b"".join(parts)), dtype="float32")
    assert rate == RATE and samples.size == audio.size


def test_empty_wav_stream_still_has_a_header():
    assert enc.StreamEncoder("wav", RATE).finish()[:4] == b"RIFF"
    assert enc.StreamEncoder("pcm", RATE).finish() == b""


def test_buffered_formats_encode_at_finish():
    encoder = enc.StreamEncoder("flac", RATE)
    assert not encoder.streaming and encoder.costly
    assert encoder.feed(tone()) == b""
    assert sf.info(io.BytesIO(encoder.finish())).frames == RATE // 2
    # Opus at a rate it does not run at: resampled as a whole, so not streamed
    assert not enc.StreamEncoder("opus", 22050).streaming


def lag_of(decoded: np.ndarray, sent: np.ndarray) -> int:
    """Where `sent` starts in `decoded` (a codec's delay), by cross-correlation."""
    return max(range(3000), key=lambda lag: float(np.dot(decoded[lag : lag + RATE // 2], sent[: RATE // 2])))


def ffmpeg_decode(data: bytes) -> np.ndarray:
    cmd = [
        "ffmpeg",
        "-hide_banner",
        "-loglevel",
        "error",
        "-i",
        "pipe:0",
        "-f",
        "f32le",
        "-ac",
        "1",
        "-ar",
        str(RATE),
        "pipe:1",
    ]
    result = subprocess.run(cmd, input=data, capture_output=True, timeout=60, check=True)
    return np.frombuffer(result.stdout, np.float32)


needs_ffmpeg = pytest.mark.skipif(not shutil.which("ffmpeg"), reason="ffmpeg is not installed")


@pytest.mark.parametrize("fmt", ["mp3", "opus", pytest.param("aac", marks=needs_ffmpeg)])
def test_mp3_opus_and_aac_leave_chunk_by_chunk_and_decode_to_the_audio(fmt):
    t = np.arange(2 * RATE) / RATE
    audio = (0.4 * np.sin(2 * np.pi * (150 * t + 300 * t**2))).astype(np.float32)  # a sweep: one alignment
    encoder = enc.StreamEncoder(fmt, RATE)
    assert encoder.streaming and encoder.costly
    chunk = RATE // 10
    parts = [encoder.feed(audio[i : i + chunk]) for i in range(0, audio.size, chunk)]
    parts.append(encoder.finish())
    if fmt == "aac":  # each chunk sends the frames it is due: all but the few ffmpeg holds back
        for k in range(1, len(parts)):
            assert adts_frames(b"".join(parts[:k])) >= (k * chunk) // 1024 - HELD_FRAMES, [len(p) for p in parts]
    else:  # each 100 ms chunk sends bytes at once
        assert all(parts[:-1]), [len(p) for p in parts]
    data = b"".join(parts)
    decoders = [] if fmt == "aac" else [sf.read(io.BytesIO(data), dtype="float32")[0]]  # libsndfile reads no AAC
    decoders += [ffmpeg_decode(data)] if shutil.which("ffmpeg") else []
    for decoded in decoders:
        # the whole length (a streamed VBR MP3 read as 0.4 s of 2), the codec's delay aside
        assert abs(decoded.size - audio.size) < 0.1 * RATE
        lag = lag_of(decoded, audio)
        n = min(decoded.size - lag, audio.size)
        assert lag < 0.06 * RATE and np.corrcoef(decoded[lag : lag + n], audio[:n])[0, 1] > 0.99
    if fmt == "mp3":  # constant bitrate at the level set, not libsndfile's 32 kbit/s default
        assert 64 < len(data) * 8 / 1000 / 2.0 < 100
    if fmt == "aac":  # every frame of the whole file's, the encoder's priming one too
        assert decoders[0].size == ffmpeg_decode(enc.encode(audio, RATE, "aac")).size


def test_a_stream_leaves_out_lame_s_tag_frame_and_only_it():
    encoder = enc.StreamEncoder("mp3", RATE)
    first = encoder.feed(tone(0.5))
    assert enc.mp3_tag_frame_length(first) == 0  # an audio frame, not the tag's zeros
    frame = enc.mp3_tag_frame_length(b"\xff\xf3\x94\xc4" + bytes(236))  # MPEG-2, 80 kbit/s, 24 kHz
    assert frame == 240 and enc.mp3_tag_frame_length(b"\xff\xf3\x94\xc4" + bytes(100)) is None
    assert enc.mp3_tag_frame_length(b"ID3\x04") == 0 and enc.mp3_tag_frame_length(b"\xff") is None
    whole = enc.encode(tone(0.5), RATE, "mp3")  # a whole file's filled tag names itself
    assert enc.mp3_tag_frame_length(whole) > 0


@needs_ffmpeg
def adts_frames(data: bytes) -> int:
    """Complete ADTS frames at the start of `data`."""
    frames, at = 0, 0
    while (length := adts_frame_length(data, at)) and at + length <= len(data):
        frames, at = frames + 1, at + length
    return frames


def test_aac_leaves_whole_adts_frames_as_they_are_encoded():
    encoder = enc.StreamEncoder("aac", RATE)
    first = encoder.feed(tone(1.0))
    assert len(first) > 0 and first[:2] == b"\xff\xf1"
    frames, at = 0, 0
    while length := adts_frame_length(first, at):
        frames, at = frames + 1, at + length
    assert at == len(first) and frames >= RATE // 1024 - HELD_FRAMES  # the second, bar what the encoder holds
    assert adts_frame_length(b"\xff\xf1\x50") is None and adts_frame_length(b"ID3" + bytes(10)) is None
    encoder.abort()


@needs_ffmpeg
def test_an_aborted_aac_stream_stops_its_ffmpeg_and_a_dropped_one_too():
    encoder = enc.StreamEncoder("aac", RATE)
    encoder.feed(tone(0.2))
    process = encoder._encoded._process
    encoder.abort()
    assert process.poll() is not None  # killed at once, not left reading a stdin nobody closes
    dropped = enc.StreamEncoder("aac", RATE)
    process = dropped._encoded._process
    del dropped
    gc.collect()
    assert process.poll() is not None


def test_an_encoder_process_that_fails_says_why():
    stream = AacStream([sys.executable, "-c", "import sys; sys.stderr.write('no encoder here'); sys.exit(3)"])
    with pytest.raises(RuntimeError, match="exit 3.*no encoder here"):
        stream.write(bytes(2 * RATE))
        stream.close()


def test_resample_length_and_identity():
    x = tone(rate=16000)
    assert enc.resample(x, 16000, 24000).size == 12000
    assert enc.resample(x, 16000, 16000) is not None and enc.resample(x, 16000, 16000).size == x.size


def test_reference_reader_resamples_and_mixes_down():
    stereo = np.stack([tone(rate=16000), tone(rate=16000)], axis=1)
    buf = io.BytesIO()
    sf.write(buf, stereo, 16000, format="WAV")
    samples = read_reference(buf.getvalue(), RATE)
    assert samples.dtype == np.float32 and samples.size == RATE // 2


@pytest.mark.parametrize("data,reason", [(b"junk", "decoded"), (enc.encode(tone(0.01), RATE, "wav"), "too short")])
def test_bad_reference(data, reason):
    with pytest.raises(BadReferenceAudio, match=reason):
        read_reference(data, RATE)


def test_base64_and_data_urls():
    assert decode_base64(base64.b64encode(b"abc").decode()) == b"abc"
    assert decode_base64("data:audio/wav;base64," + base64.b64encode(b"abc").decode()) == b"abc"
    with pytest.raises(BadReferenceAudio):
        decode_base64("not base64!")
