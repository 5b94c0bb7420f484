"""Cutting an LLM's token stream into sentences as it is written, so each one can be spoken
while the model writes the next.

A sentence ends after `.`, `!`, `?` or `…` (closing quotes and brackets included) once the next
character is whitespace, right after CJK sentence punctuation, or at a line break. The text
after a boundary must be seen before the boundary is decided, so "3.14" and "e.g. this" never
split. Short pieces (a bare "Sure!", a list number "1.") join the next sentence; a run-on
without punctuation is cut at a clause break or a space once it grows past `max_chars`, which
bounds the time to the first audio.

Pure Python: no Ray, no MLX.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncGenerator

MIN_SENTENCE_CHARS = 10
MAX_SENTENCE_CHARS = 240

_CLOSERS = "\"')]}\u2019\u201d\u00bb"
# An ASCII end mark (and its closers) followed by whitespace; a CJK end mark; line breaks.
_END = re.compile(rf"[.!?\u2026]+[{re.escape(_CLOSERS)}]*(?=\s)|[。！？]+[{re.escape(_CLOSERS)}」』]*|\n+")
_CLAUSE = re.compile(r"[,;:\u2014，；：](?=\s)|[，；：、]")
# A period after these is no sentence end ("Dr. Smith", "e.g. this").
ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "cf"})


def _is_abbreviation(text: str, end_mark: int) -> bool:
    if text[end_mark] != ".":
        return False
    words = text[:end_mark].split()
    return bool(words) and words[-1].lower().lstrip("(\"'") in ABBREVIATIONS


def speakable(text: str) -> bool:
    """Whether a piece has anything to say (not only symbols, markdown rules or emoji)."""
    return any(c.isalnum() for c in text)


class SentenceSplitter:
    """Feed text deltas, get back the sentences they complete; `flush()` at the end."""

    def __init__(self, min_chars: int = MIN_SENTENCE_CHARS, max_chars: int = MAX_SENTENCE_CHARS):
        if not 0 < min_chars < max_chars:
            raise ValueError("need 0 < min_chars < max_chars")
        self.min_chars, self.max_chars = min_chars, max_chars
        self._buffer = ""

    def feed(self, delta: str) -> list[str]:
        self._buffer += delta
        sentences = []
        while (cut := self._next_cut()) is not None:
            sentence, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:].lstrip()
            if sentence:
                sentences.append(sentence)
        return sentences

    def flush(self) -> list[str]:
        rest, self._buffer = self._buffer.strip(), ""
        return [rest] if rest else []

    def _next_cut(self) -> int | None:
        text = self._buffer
        for match in _END.finditer(text):
            if match.group().startswith("\n") or not _is_abbreviation(text, match.start()):
                if len(text[: match.end()].strip()) >= self.min_chars:
                    return match.end()
        if len(text) <= self.max_chars:
            return None
        return self._run_on_cut(text[: self.max_chars])

    @staticmethod
    def _run_on_cut(head: str) -> int:
        """Where a run-on sentence is cut: its last clause break, else its last space."""
        clauses = list(_CLAUSE.finditer(head))
        if clauses:
            return clauses[-1].end()
        space = head.rfind(" ")
        return space if space > 0 else len(head)


async def sentences_of(deltas: AsyncGenerator[str, None], **limits: int) -> AsyncGenerator[str, None]:
    """The sentences of a text stream, each as soon as the text after it decides its end.
    Closing it closes `deltas` (the LLM stream) at once, not when garbage-collected."""
    splitter = SentenceSplitter(**limits)
    async with contextlib.aclosing(deltas):
        async for delta in deltas:
            for sentence in splitter.feed(delta):
                yield sentence
    for sentence in splitter.flush():
        yield sentence
