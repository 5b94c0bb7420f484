"""A strict, incremental decoder for the worker's server-sent events.

Bytes arrive in arbitrary pieces; the decoder returns each frame's data payload as soon as the
frame is complete, and gives the same payloads whatever the split. Frames end at `\\n\\n` or
`\\r\\n\\r\\n`, whichever comes first; `:` lines are comments; `data:` lines (one optional
leading space removed) are joined with `\\n`; frames without data are skipped. A frame that is
not UTF-8, larger than the frame limit, or unfinished at end of stream is an error: on a paid
remote GPU a silently misread stream is worse than a failed one.
"""

from __future__ import annotations

MAX_FRAME_BYTES = 2 * 1024 * 1024
_SEPARATORS = (b"\n\n", b"\r\n\r\n")
_LONGEST_SEPARATOR = max(len(s) for s in _SEPARATORS)


class SSEDecodeError(Exception):
    """The byte stream is not valid server-sent events."""


class SSEDecoder:
    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES):
        self._buffer = bytearray()
        self._scanned = 0  # bytes already searched for a separator (minus a possible partial one)
        self._max_frame = max_frame_bytes

    def feed(self, data: bytes) -> list[str]:
        """Add bytes; return the data payloads of the frames they complete, in order."""
        self._buffer += data
        payloads = []
        while (frame := self._next_frame()) is not None:
            payload = _frame_data(frame)
            if payload is not None:
                payloads.append(payload)
        if len(self._buffer) > self._max_frame:
            raise SSEDecodeError(f"SSE frame larger than {self._max_frame} bytes")
        return payloads

    def finish(self) -> None:
        """End of stream: anything but whitespace left over is a truncated frame."""
        if bytes(self._buffer).strip():
            raise SSEDecodeError("stream ended inside an unterminated SSE frame")

    def _next_frame(self) -> bytes | None:
        start = max(0, self._scanned - _LONGEST_SEPARATOR + 1)
        found = [(index, len(sep)) for sep in _SEPARATORS if (index := self._buffer.find(sep, start)) >= 0]
        if not found:
            self._scanned = len(self._buffer)
            return None
        index, length = min(found)
        frame = bytes(self._buffer[:index])
        del self._buffer[: index + length]
        self._scanned = 0
        if len(frame) > self._max_frame:
            raise SSEDecodeError(f"SSE frame larger than {self._max_frame} bytes")
        return frame


def _frame_data(frame: bytes) -> str | None:
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        raise SSEDecodeError("SSE frame is not valid UTF-8") from None
    data_lines = []
    for line in text.split("\n"):
        line = line.removesuffix("\r")
        if line.startswith(":"):
            continue
        if line == "data" or line.startswith("data:"):
            value = line[len("data:") :]
            data_lines.append(value[1:] if value.startswith(" ") else value)
        # event:, id:, retry: and unknown fields carry nothing the worker protocol uses
    return "\n".join(data_lines) if data_lines else None
