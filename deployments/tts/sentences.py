"""Splitting text into synthesis segments, as OminiX-API does for all its Qwen3-TTS routes and
its WebSocket TTS, shared by POST /v1/audio/speech and the WebSocket route.

1. Drop every character that is not alphanumeric, whitespace or allowed punctuation.
2. Split after CJK sentence punctuation, after ASCII `.!?,;:` when followed by whitespace or
   the end, and at newlines; trim; drop empty pieces.
3. Merge pieces until a segment has at least `min_chars` characters; a short tail joins the
   previous segment.

Pure Python: no Ray, no MLX.
"""

from __future__ import annotations

import re

CJK_BREAKS = "。！？…，；：、"
ASCII_BREAKS = ".!?,;:"
_ALLOWED_PUNCTUATION = set(CJK_BREAKS + ASCII_BREAKS + "'\"\u2018\u2019\u201c\u201d—–-()（）")
MIN_SEGMENT_CHARS = 10

# A break: after a CJK mark; after an ASCII mark followed by whitespace/end; at a newline.
_BREAK = re.compile(rf"(?<=[{re.escape(CJK_BREAKS)}])|(?<=[{re.escape(ASCII_BREAKS)}])(?=\s|$)|\n")


def clean(text: str) -> str:
    """Step 1: keep alphanumerics, whitespace and the allowed punctuation."""
    return "".join(c for c in text if c.isalnum() or c.isspace() or c in _ALLOWED_PUNCTUATION)


def split_pieces(text: str) -> list[str]:
    """Step 2: the raw pieces, trimmed, empties dropped."""
    return [p.strip() for p in _BREAK.split(text) if p and p.strip()]


def merge_pieces(pieces: list[str], min_chars: int = MIN_SEGMENT_CHARS) -> list[str]:
    """Step 3: accumulate short pieces; a short tail joins the previous segment."""
    segments: list[str] = []
    current = ""
    for piece in pieces:
        current = f"{current} {piece}" if current else piece
        if len(current) >= min_chars:
            segments.append(current)
            current = ""
    if current:
        if segments:
            segments[-1] = f"{segments[-1]} {current}"
        else:
            segments.append(current)
    return segments


def split_sentences(text: str, min_chars: int = MIN_SEGMENT_CHARS) -> list[str]:
    """The synthesis segments of `text`; empty or all-symbol text gives none."""
    return merge_pieces(split_pieces(clean(text)), min_chars)
