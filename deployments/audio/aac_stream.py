"""AAC (ADTS) encoded as the audio arrives: one ffmpeg process per stream, fed PCM on its stdin.

ADTS frames stand alone (each has its own header), so they can leave as soon as ffmpeg writes
them. A reader thread drains ffmpeg's stdout (so that a write to its stdin can never wait on a
full stdout pipe) and counts the complete frames. After a write, `write` waits until the frames
that audio is due are out: all of it in 1024-sample frames but `HELD_FRAMES`, what ffmpeg holds
back (its AAC encoder's delay and a partial input packet: at most 3 frames measured at 16, 24
and 44.1 kHz, one more kept in hand). So each write returns what it is due however loaded the
machine, as libsndfile's formats do; only an ffmpeg stuck for `DUE_TIMEOUT_S` lets a write
return short, its bytes then going with the next one. `abort` (and the object's collection)
kills the process, for a stream whose listener left.
"""

from __future__ import annotations

import os
import subprocess
import threading
import weakref

FRAME_SAMPLES = 1024  # an AAC-LC frame
HELD_FRAMES = 4
DUE_TIMEOUT_S = 30.0
_ADTS_HEADER = 7


class AacStream:
    def __init__(self, command: list[str]):
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
        )
        self._output = _Frames()
        # The reader holds the output, not this object: dropping the stream kills the process,
        # whose stdout then ends and the thread with it.
        threading.Thread(target=self._output.read, args=(self._process.stdout,), name="aac-stream", daemon=True).start()
        self._kill = weakref.finalize(self, _kill, self._process)
        self._samples = 0

    def write(self, pcm16: bytes) -> bytes:
        """Send s16le mono PCM; the ADTS bytes ready once ffmpeg has encoded what it can of it."""
        try:
            self._process.stdin.write(pcm16)
        except BrokenPipeError:
            self._fail()
        self._samples += len(pcm16) // 2
        self._output.wait_for_frames(self._samples // FRAME_SAMPLES - HELD_FRAMES, DUE_TIMEOUT_S)
        return self._output.take()

    def close(self, timeout_s: float = 60.0) -> bytes:
        """End the input: the rest of the stream (ffmpeg flushes its encoder)."""
        try:
            self._process.stdin.close()
            self._process.wait(timeout=timeout_s)
            self._output.wait_for_end(timeout_s)
            if self._process.returncode != 0:
                self._fail()
            return self._output.take()
        finally:
            self._kill()

    def abort(self) -> None:
        self._kill()

    def _fail(self) -> None:
        self._process.wait(timeout=10)
        error = self._process.stderr.read().decode(errors="replace")[-300:]
        raise RuntimeError(f"ffmpeg failed to encode aac (exit {self._process.returncode}): {error}")


class _Frames:
    """ffmpeg's output as it is read, and how many complete ADTS frames it holds."""

    def __init__(self):
        self._data = bytearray()
        self._sent = 0  # bytes already handed out
        self._parsed = 0  # bytes in complete frames
        self._count = 0
        self._ended = False
        self._changed = threading.Condition()

    def read(self, stdout) -> None:
        try:
            while data := os.read(stdout.fileno(), 65536):
                with self._changed:
                    self._data += data
                    self._count_frames()
                    self._changed.notify_all()
        finally:
            stdout.close()
            with self._changed:
                self._ended = True
                self._changed.notify_all()

    def wait_for_frames(self, count: int, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._count >= count or self._ended, timeout=timeout_s)

    def wait_for_end(self, timeout_s: float) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._ended, timeout=timeout_s)

    def take(self) -> bytes:
        with self._changed:
            data = bytes(self._data[self._sent :])
            self._sent = len(self._data)
        return data

    def _count_frames(self) -> None:
        while (length := adts_frame_length(self._data, self._parsed)) and self._parsed + length <= len(self._data):
            self._parsed += length
            self._count += 1


def adts_frame_length(data: bytes | bytearray, at: int = 0) -> int | None:
    """The length of the ADTS frame (header included) starting at `at`, None without a sync word."""
    header = data[at : at + _ADTS_HEADER]
    if len(header) < _ADTS_HEADER or header[0] != 0xFF or header[1] & 0xF6 != 0xF0:
        return None
    return ((header[3] & 0x03) << 11) | (header[4] << 3) | (header[5] >> 5)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()
    for pipe in (process.stdin, process.stderr):  # stdout is the reader's to close
        if pipe and not pipe.closed:
            try:
                pipe.close()
            except OSError:
                pass
