"""Audio OUTPUT: float32 mono samples -> the bytes of a response format. The one encoder for
every route (HTTP speech, SSE, WebSocket).

- `pcm`: raw signed 16-bit little-endian mono; chunk-safe.
- `wav`: PCM16 in RIFF. `wav_header(None)` is a streaming header whose size fields are
  0xFFFFFFFF ("unknown length", what OpenAI's API streams), so WAV streams chunk by chunk too.
- `mp3`, `flac`, `opus` (in Ogg): soundfile/libsndfile encodes the complete audio.
- `aac` (in ADTS): ffmpeg when installed, else an `UnsupportedFormat`.

No Ray, no MLX.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from typing import Optional

import numpy as np

# format -> Content-Type
MEDIA_TYPES = {
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "flac": "audio/flac",
    "opus": "audio/ogg",
    "aac": "audio/aac",
}
# Formats whose bytes can be sent as the audio is generated (a header, then PCM).
STREAMABLE = frozenset({"pcm", "wav"})
FORMATS = tuple(MEDIA_TYPES)

# soundfile (format, subtype) for the formats libsndfile writes.
_SOUNDFILE = {"mp3": ("MP3", None), "flac": ("FLAC", "PCM_16"), "opus": ("OGG", "OPUS")}
# Opus only runs at these rates; other model rates are resampled for it.
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_UNKNOWN_SIZE = 0xFFFFFFFF


class UnsupportedFormat(ValueError):
    """The format is unknown, or its encoder is not installed on this machine."""


def check_format(fmt: str) -> None:
    """Raise `UnsupportedFormat` before any synthesis if `fmt` cannot be produced here."""
    if fmt not in MEDIA_TYPES:
        raise UnsupportedFormat(f"Unsupported response_format '{fmt}'; use one of {', '.join(FORMATS)}")
    if fmt == "aac" and not ffmpeg_available():
        raise UnsupportedFormat("response_format 'aac' needs ffmpeg, which is not installed on this server")


def ffmpeg_available() -> bool:
    return shutil.which("ffmpeg") is not None


def to_pcm16(samples: np.ndarray) -> bytes:
    """float32 in [-1, 1] (clipped) -> s16le bytes."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    return (clipped * 32767.0).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: Optional[int] = None) -> bytes:
    """A 44-byte PCM16 mono RIFF header; `data_bytes=None` marks a stream of unknown length."""
    data_size = _UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff_size = _UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data_size)
    )


def encode_wav(samples: np.ndarray, sample_rate: int) -> bytes:
    pcm = to_pcm16(samples)
    return wav_header(sample_rate, len(pcm)) + pcm


def encode(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """The complete audio in `fmt`."""
    check_format(fmt)
    samples = np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0)
    if fmt == "pcm":
        return to_pcm16(samples)
    if fmt == "wav":
        return encode_wav(samples, sample_rate)
    if fmt == "aac":
        return _ffmpeg_aac(samples, sample_rate)
    return _soundfile(samples, sample_rate, fmt)


class StreamEncoder:
    """Encodes audio arriving chunk by chunk: `feed` returns bytes to send now, `finish` the rest.

    Streamable formats send each chunk as it comes (WAV: a streaming header first); the others
    collect the samples and encode the whole audio in `finish`.
    """

    def __init__(self, fmt: str, sample_rate: int):
        check_format(fmt)
        self.fmt = fmt
        self.sample_rate = sample_rate
        self._header_sent = False
        self._pending: list[np.ndarray] = []

    @property
    def streaming(self) -> bool:
        return self.fmt in STREAMABLE

    def feed(self, samples: np.ndarray) -> bytes:
        if not self.streaming:
            self._pending.append(np.asarray(samples, dtype=np.float32).reshape(-1))
            return b""
        return self._header() + to_pcm16(samples)

    def finish(self) -> bytes:
        if self.streaming:
            return self._header()  # an empty stream is still a valid (empty) WAV
        audio = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
        return encode(audio, self.sample_rate, self.fmt)

    def _header(self) -> bytes:
        if self.fmt != "wav" or self._header_sent:
            return b""
        self._header_sent = True
        return wav_header(self.sample_rate)


def resample(samples: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Linear-interpolation resampling (adequate for speech prompts and codec rates)."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if rate_in == rate_out or samples.size == 0:
        return samples
    n_out = max(1, int(round(samples.size * rate_out / rate_in)))
    positions = np.arange(n_out, dtype=np.float64) * (rate_in / rate_out)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def _soundfile(samples: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    import soundfile as sf

    container, subtype = _SOUNDFILE[fmt]
    if fmt == "opus" and sample_rate not in _OPUS_RATES:
        samples, sample_rate = resample(samples, sample_rate, 48000), 48000
    out = io.BytesIO()
    sf.write(out, samples, sample_rate, format=container, subtype=subtype)
    return out.getvalue()


def _ffmpeg_aac(samples: np.ndarray, sample_rate: int) -> bytes:
    cmd = [
        "ffmpeg",
        "-hide_banner",
        "-loglevel",
        "error",
        "-f",
        "s16le",
        "-ar",
        str(sample_rate),
        "-ac",
        "1",
        "-i",
        "pipe:0",
        "-c:a",
        "aac",
        "-f",
        "adts",
        "pipe:1",
    ]
    result = subprocess.run(cmd, input=to_pcm16(samples), capture_output=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"ffmpeg failed to encode aac: {result.stderr.decode(errors='replace')[-300:]}")
    return result.stdout
