"""Audio OUTPUT: float32 mono samples -> the bytes of a response format. The one encoder for
every route (HTTP speech, SSE, WebSocket).

- `pcm`: raw signed 16-bit little-endian mono; chunk-safe.
- `wav`: PCM16 in RIFF. `wav_header(None)` is a streaming header whose size fields are
  0xFFFFFFFF ("unknown length", what OpenAI's API streams), so WAV streams chunk by chunk too.
- `mp3`, `opus` (in Ogg): soundfile/libsndfile; streamed as they are encoded (`StreamEncoder`).
- `flac`: soundfile/libsndfile, the complete audio (see `StreamEncoder` for why).
- `aac` (in ADTS): ffmpeg when installed, else an `UnsupportedFormat`; streamed through one
  ffmpeg process per stream (`aac_stream.py`).

No Ray, no MLX.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from typing import Optional

import numpy as np

from deployments.audio.aac_stream import AacStream

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

    `pcm` and `wav` send each chunk as it comes (WAV: a streaming header first). `mp3` and `opus`
    send what libsndfile has encoded so far (`_EncodedStream`), `aac` what ffmpeg has
    (`AacStream`). `flac` collects the samples and encodes the whole audio in `finish`: a FLAC
    stream's header cannot carry its length, and soundfile, among other readers, then refuses it.
    A stream that may end before `finish` (its listener left) is used as a context manager,
    whose exit calls `abort`.
    """

    def __init__(self, fmt: str, sample_rate: int):
        check_format(fmt)
        self.fmt = fmt
        self.sample_rate = sample_rate
        self._header_sent = False
        self._pending: list[np.ndarray] = []
        self._encoded = _encoded_stream(fmt, sample_rate)

    @property
    def streaming(self) -> bool:
        return self.fmt in STREAMABLE or self._encoded is not None

    @property
    def costly(self) -> bool:
        """Whether `feed` runs a codec (worth a thread off an event loop) rather than a copy."""
        return self.fmt not in STREAMABLE

    def feed(self, samples: np.ndarray) -> bytes:
        if self._encoded is not None:
            return self._encoded.write(samples)
        if not self.streaming:
            self._pending.append(np.asarray(samples, dtype=np.float32).reshape(-1))
            return b""
        return self._header() + to_pcm16(samples)

    def finish(self) -> bytes:
        if self._encoded is not None:
            return self._encoded.close()
        if self.streaming:
            return self._header()  # an empty stream is still a valid (empty) WAV
        audio = np.concatenate(self._pending) if self._pending else np.zeros(0, np.float32)
        return encode(audio, self.sample_rate, self.fmt)

    def abort(self) -> None:
        """Drop the stream unfinished: an encoder process (aac) stops now, not at collection."""
        if isinstance(self._encoded, AacStream):
            self._encoded.abort()

    def __enter__(self) -> StreamEncoder:
        return self

    def __exit__(self, *exc_info) -> None:
        self.abort()

    def _header(self) -> bytes:
        if self.fmt != "wav" or self._header_sent:
            return b""
        self._header_sent = True
        return wav_header(self.sample_rate)


def _encoded_stream(fmt: str, sample_rate: int) -> _EncodedStream | _AacPcmStream | None:
    if fmt == "aac":
        return _AacPcmStream(sample_rate)
    # Opus runs at five rates only; the whole audio is resampled for the others (`_soundfile`),
    # which chunk by chunk would click at every boundary.
    if fmt == "mp3" or (fmt == "opus" and sample_rate in _OPUS_RATES):
        return _EncodedStream(fmt, sample_rate)
    return None


class _AacPcmStream(AacStream):
    """`AacStream` fed float samples, like `_EncodedStream`."""

    def __init__(self, sample_rate: int):
        super().__init__(_ffmpeg_aac_command(sample_rate, streaming=True))

    def write(self, samples: np.ndarray) -> bytes:
        return super().write(to_pcm16(samples))


class _EncodedStream:
    """libsndfile encoding into memory, handing out the bytes as they are appended.

    MP3 is constant bitrate (~80 kbit/s at 24 kHz: what a whole file's VBR spends on speech and
    more; libsndfile's default CBR is 32). Its first frame is LAME's tag, a placeholder that
    libsndfile fills at close with the frame count: sent as the zeros it is while streaming,
    decoders would trust it (a VBR stream with it read as 0.4 s of 2), so the stream leaves that
    frame out; a CBR stream's length is then told from its size. Ogg Opus pages are final once
    written; they are flushed every 100 ms of audio instead of libsndfile's default 1 s, so a
    chunk's audio leaves with it.
    """

    def __init__(self, fmt: str, sample_rate: int):
        import soundfile as sf

        self._sink = _AppendOnly()
        container, subtype = _SOUNDFILE[fmt]
        self._file = sf.SoundFile(
            self._sink, "w", samplerate=sample_rate, channels=1, format=container, subtype=subtype
        )
        if fmt == "mp3":
            _sf_command(self._file, _SFC_SET_BITRATE_MODE, "int", _SF_BITRATE_MODE_CONSTANT)
            _sf_command(self._file, _SFC_SET_COMPRESSION_LEVEL, "double", _MP3_STREAM_LEVEL)
        if fmt == "opus":
            _sf_command(self._file, _SFC_SET_OGG_PAGE_LATENCY_MS, "double", _OPUS_PAGE_MS)
        self._tag_checked = fmt != "mp3"

    def write(self, samples: np.ndarray) -> bytes:
        self._file.write(np.clip(np.asarray(samples, dtype=np.float32).reshape(-1), -1.0, 1.0))
        return self._take(final=False)

    def close(self) -> bytes:
        if not self._file.closed:
            self._file.close()
        return self._take(final=True)

    def _take(self, final: bool) -> bytes:
        if not self._tag_checked:
            length = mp3_tag_frame_length(self._sink.unsent())
            if length is None and not final:
                return b""  # too few bytes yet to tell
            self._sink.skip(length or 0)
            self._tag_checked = True
        return self._sink.take()


# sndfile.h's commands and values that soundfile has no names for. sf_command's return value
# means something else for each command, so the effects are what the tests check.
_SFC_SET_COMPRESSION_LEVEL = 0x1301
_SFC_SET_OGG_PAGE_LATENCY_MS = 0x1302
_SFC_SET_BITRATE_MODE = 0x1305
_SF_BITRATE_MODE_CONSTANT = 0
_MP3_STREAM_LEVEL = 0.5  # 0..1 over the MPEG version's bitrates, high to low: 80 kbit/s at 24 kHz
_OPUS_PAGE_MS = 100.0


def _sf_command(file, command: int, ctype: str, value) -> None:
    import soundfile as sf

    sf._snd.sf_command(file._file, command, sf._ffi.new(f"{ctype}*", value), sf._ffi.sizeof(ctype))


# MPEG audio Layer III frame headers (ISO 11172-3, 13818-3): kbit/s by the bitrate index for
# MPEG-1 and for MPEG-2/2.5, sample rates by the version bits (3: MPEG-1, 2: MPEG-2, 0: 2.5).
_MPEG1_KBPS = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
_MPEG2_KBPS = (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
_MPEG_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}


def mp3_tag_frame_length(head: bytes) -> Optional[int]:
    """The length of the LAME/Xing tag frame `head` opens with (its placeholder is zeros after
    the header; filled, it names itself Xing or Info), 0 if it opens with another frame or no
    Layer III frame, None if too few bytes are there to tell."""
    if len(head) < 4:
        return None
    version, layer = (head[1] >> 3) & 3, (head[1] >> 1) & 3
    bitrate_index, rate_index, padding = head[2] >> 4, (head[2] >> 2) & 3, (head[2] >> 1) & 1
    if head[0] != 0xFF or head[1] & 0xE0 != 0xE0 or version == 1 or layer != 1:
        return 0
    if bitrate_index in (0, 15) or rate_index == 3:
        return 0
    mpeg1 = version == 3
    kbps = (_MPEG1_KBPS if mpeg1 else _MPEG2_KBPS)[bitrate_index]
    length = (144 if mpeg1 else 72) * kbps * 1000 // _MPEG_RATES[version][rate_index] + padding
    if len(head) < length:
        return None
    mono = head[3] >> 6 == 3
    side_info = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    body = head[4:length]
    is_tag = not any(body) or body[side_info : side_info + 4] in (b"Xing", b"Info")
    return length if is_tag else 0


class _AppendOnly(io.RawIOBase):
    """A seekable in-memory file whose bytes are handed out once each, as they are appended."""

    def __init__(self):
        self._data = bytearray()
        self._pos = 0
        self._sent = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b) -> int:
        b = bytes(b)
        end = self._pos + len(b)
        if end > len(self._data):
            self._data.extend(bytes(end - len(self._data)))
        self._data[self._pos : end] = b
        self._pos = end
        return len(b)

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size is None or size < 0 else self._pos + size
        chunk = bytes(self._data[self._pos : end])
        self._pos += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._data)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def unsent(self) -> bytes:
        return bytes(self._data[self._sent :])

    def skip(self, size: int) -> None:
        self._sent = min(len(self._data), self._sent + size)

    def take(self) -> bytes:
        chunk = bytes(self._data[self._sent :])
        self._sent = len(self._data)
        return chunk


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


def _ffmpeg_aac_command(sample_rate: int, streaming: bool = False) -> list[str]:
    # A stream's raw input is not probed: ffmpeg would otherwise read a second of it before it
    # encodes anything. (`-fflags nobuffer` would also drop the encoder's priming frame.)
    live = ["-probesize", "32", "-analyzeduration", "0"] if streaming else []
    raw_input = ["-f", "s16le", "-ar", str(sample_rate), "-ac", "1", "-i", "pipe:0"]
    return [
        "ffmpeg",
        "-hide_banner",
        "-loglevel",
        "error",
        *live,
        *raw_input,
        "-c:a",
        "aac",
        "-f",
        "adts",
        "pipe:1",
    ]


def _ffmpeg_aac(samples: np.ndarray, sample_rate: int) -> bytes:
    cmd = _ffmpeg_aac_command(sample_rate)
    result = subprocess.run(cmd, input=to_pcm16(samples), capture_output=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"ffmpeg failed to encode aac: {result.stderr.decode(errors='replace')[-300:]}")
    return result.stdout
