"""Log-probabilities of generated tokens in OpenAI's shapes, and the pure functions that shape them.

The LLM slot sends one `TokenLogprob` per generated token (the chat shape: the token's text, its
log-probability, its UTF-8 bytes, and the most likely alternatives, best first). Chat answers
carry them as they are (`choices[].logprobs.content`); text completions reshape them into the
legacy columns (`tokens`, `token_logprobs`, `top_logprobs` as dicts, `text_offset`).

A token need not end on a character boundary (byte-level BPE splits multi-byte characters):
its `bytes` are exact, and its `token` is then written as OpenAI writes such tokens,
`bytes:\\xe2\\x80`. No Ray, no MLX.
"""

from __future__ import annotations

import codecs
import functools
from typing import Optional

from pydantic import BaseModel

# What OpenAI reports for a token the model cannot produce (JSON has no -Infinity).
MIN_LOGPROB = -9999.0
MAX_TOP_LOGPROBS = 20  # chat's top_logprobs
MAX_COMPLETION_LOGPROBS = 5  # text completions' logprobs


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: Optional[list[int]] = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(BaseModel):
    """A chat choice's (or chunk's) `logprobs`."""

    content: Optional[list[TokenLogprob]] = None
    refusal: Optional[list[TokenLogprob]] = None


class CompletionLogprobs(BaseModel):
    """A text completion choice's `logprobs` (the legacy shape)."""

    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    text_offset: list[int] = []


def token_text(data: bytes) -> str:
    """A token's text: its bytes decoded, or `bytes:\\x..` when they are not whole UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in data)


@functools.lru_cache(maxsize=1)
def byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet (GPT-2, Whisper, Qwen, SmolLM2, Llama 3): the character
    that stands for each byte in the vocabulary's token strings."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + shifted)] = b
            shifted += 1
    return table


def clamp(logprob: float) -> float:
    """-inf (a masked token) and NaN become MIN_LOGPROB, as OpenAI reports them."""
    return logprob if logprob >= MIN_LOGPROB else MIN_LOGPROB


def token_logprob(
    data: bytes, logprob: float, top: list[tuple[bytes, float]], keep: Optional[int] = None
) -> TokenLogprob:
    """One generated token: its bytes and log-probability, and `top` (any order) as the `keep`
    most likely alternatives, best first (ties: in the order given)."""
    ranked = sorted(top, key=lambda pair: -clamp(pair[1]))[: len(top) if keep is None else keep]
    return TokenLogprob(
        token=token_text(data),
        logprob=clamp(logprob),
        bytes=list(data),
        top_logprobs=[TopLogprob(token=token_text(b), logprob=clamp(v), bytes=list(b)) for b, v in ranked],
    )


class CompletionLogprobShaper:
    """Turns a text completion choice's `TokenLogprob`s into the legacy shape, chunk after
    chunk: `text_offset` counts characters of the choice's text from `start` (the echoed prompt's
    length), and a token that ends inside a character is at that character's offset."""

    def __init__(self, start: int = 0):
        self._offset = start
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def shape(self, entries: list[TokenLogprob]) -> CompletionLogprobs:
        out = CompletionLogprobs()
        for entry in entries:
            out.tokens.append(entry.token)
            out.token_logprobs.append(entry.logprob)
            out.top_logprobs.append(_top_dict(entry))
            out.text_offset.append(self._offset)
            self._offset += len(self._decoder.decode(bytes(entry.bytes or b"")))
        return out


def _top_dict(entry: TokenLogprob) -> dict[str, float]:
    """The alternatives as {token: logprob}, best first, and the chosen token always among them
    (OpenAI: "up to logprobs+1 elements")."""
    top: dict[str, float] = {}
    for alt in entry.top_logprobs:
        top.setdefault(alt.token, alt.logprob)
    top.setdefault(entry.token, entry.logprob)
    return top
