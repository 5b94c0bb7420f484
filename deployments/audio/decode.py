"""Audio bytes -> mono float32 samples at a target rate.

soundfile (libsndfile) reads WAV, FLAC, OGG/Vorbis/Opus in-process, and MP3 when ffmpeg is not
installed. Anything else (m4a/aac, webm, mp4, ...), and MP3 when it can, goes through an
`ffmpeg` subprocess: libsndfile sizes an MP3 by its first frame, so a VBR file without a
Xing/Info header (a stream's recording, a cut or joined file) was read short, a 6 s file as
0.58 s (tests/unit/audio/test_audio.py). The
bytes reach ffmpeg through an anonymous in-memory file (Linux memfd: seekable, which MP4
files with their index at the end need) or, elsewhere, its stdin; the samples come back on
its stdout. No temporary file is ever written.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import numpy as np

from deployments.audio.resample import resample

FFMPEG_TIMEOUT_S = 300


class AudioDecodeError(ValueError):
    """The bytes are not audio this server can decode; the message says why, for the client."""


def decode_audio(data: bytes, target_rate: int, *, ffmpeg: str | None = "ffmpeg") -> np.ndarray:
    """Decode any supported container/codec into mono float32 at `target_rate` Hz."""
    if not data:
        raise AudioDecodeError("The audio file is empty.")
    ffmpeg_path = shutil.which(ffmpeg) if ffmpeg else None
    if ffmpeg_path is not None and _is_mp3(data):
        return _checked(_read_ffmpeg(data, target_rate, ffmpeg_path))
    try:
        samples, rate = _read_soundfile(data)
    except AudioDecodeError as soundfile_error:
        if ffmpeg_path is None:
            raise AudioDecodeError(
                f"{soundfile_error} Formats other than WAV/FLAC/OGG/MP3 need ffmpeg, which is "
                "not installed on the server."
            ) from None
        return _checked(_read_ffmpeg(data, target_rate, ffmpeg_path))
    return _checked(resample(to_mono(samples), rate, target_rate))


def to_mono(samples: np.ndarray) -> np.ndarray:
    """Average the channels of a (frames, channels) array; a 1-D array is already mono."""
    samples = np.asarray(samples, dtype=np.float32)
    return samples if samples.ndim == 1 else samples.mean(axis=1, dtype=np.float32)


def _checked(samples: np.ndarray) -> np.ndarray:
    if samples.size == 0:
        raise AudioDecodeError("The audio file contains no samples.")
    if not np.all(np.isfinite(samples)):
        raise AudioDecodeError("The audio file contains invalid (non-finite) samples.")
    return np.ascontiguousarray(samples, dtype=np.float32)


def _is_mp3(data: bytes) -> bool:
    import soundfile as sf

    try:
        return sf.info(io.BytesIO(data)).format == "MP3"
    except Exception:  # not a file libsndfile knows
        return False


def _read_soundfile(data: bytes) -> tuple[np.ndarray, int]:
    import soundfile as sf

    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as e:  # libsndfile reports every failure as a generic error
        raise AudioDecodeError(f"The audio could not be decoded ({_first_line(e)}).") from None
    return samples, rate


def _read_ffmpeg(data: bytes, target_rate: int, ffmpeg_path: str) -> np.ndarray:
    output_args = ["-vn", "-ac", "1", "-ar", str(target_rate), "-f", "f32le", "pipe:1"]
    base = [ffmpeg_path, "-nostdin", "-hide_banner", "-loglevel", "error"]
    memfd = _memfd_with(data)
    try:
        if memfd is not None:
            cmd = base + ["-i", f"/proc/self/fd/{memfd}", *output_args]
            proc = subprocess.run(cmd, capture_output=True, pass_fds=(memfd,), timeout=FFMPEG_TIMEOUT_S)
        else:
            # communicate() writes stdin and reads stdout together: no pipe deadlock.
            cmd = [ffmpeg_path, "-hide_banner", "-loglevel", "error", "-i", "pipe:0", *output_args]
            proc = subprocess.run(cmd, input=data, capture_output=True, timeout=FFMPEG_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AudioDecodeError(f"Decoding the audio took longer than {FFMPEG_TIMEOUT_S}s.") from None
    finally:
        if memfd is not None:
            os.close(memfd)
    if proc.returncode != 0 or (not proc.stdout and proc.stderr.strip()):
        detail = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = detail[-1] if detail else f"ffmpeg exited with {proc.returncode}"
        raise AudioDecodeError(f"The audio could not be decoded (ffmpeg: {reason}).")
    usable = len(proc.stdout) - len(proc.stdout) % 4
    return np.frombuffer(proc.stdout[:usable], dtype="<f4").copy()


def _memfd_with(data: bytes) -> int | None:
    """An anonymous in-memory file holding `data` (Linux), or None where there is none."""
    if not hasattr(os, "memfd_create") or not sys.platform.startswith("linux"):
        return None
    fd = os.memfd_create("ominix-audio", 0)  # not inheritable; pass_fds makes it so for ffmpeg
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
    except OSError:
        os.close(fd)
        return None
    return fd


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
