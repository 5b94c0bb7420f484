"""Log-probabilities of generated tokens, as the LLM and VLM engines report them: the bytes each
token id stands for, and one token's entry (its log-probability and the most likely
alternatives) in OpenAI's shape.

The numbers come from mlx-lm's BatchGenerator (mlx-vlm's generate step likewise), which hands
back, with every sampled token, the log-softmax of the logits its sampler saw: after the logits
processors (logit_bias, penalties, any constraint mask), before temperature and
top-p/top-k/min-p, as vLLM reports them by default. The engine picks the chosen token's value
and the top k out of that row (deployments/llm/engine.py, deployments/vlm/engine.py); this
module turns ids into text. No MLX here: the vocabulary comes from the detokenizer.
"""

from __future__ import annotations

from typing import Any, Optional

from deployments.protocol.logprobs import TokenLogprob, byte_level_table, token_logprob

SPM_SPACE = "\u2581".encode()  # SentencePiece's word boundary


class TokenBytes:
    """Token id -> the UTF-8 bytes it stands for, in the model family's own encoding: byte-level
    BPE (GPT-2, Qwen, SmolLM2, Llama 3), SentencePiece with byte fallback (`<0xE2>`, `▁`), or,
    for any other tokenizer, the token decoded on its own."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self._tokenmap = getattr(getattr(tokenizer, "detokenizer", None), "tokenmap", None)
        self._cache: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        data = self._cache.get(token)
        if data is None:
            data = self._cache[token] = self._bytes_of(token)
        return data

    def _bytes_of(self, token: int) -> bytes:
        piece = None
        if self._tokenmap:
            # An id past the tokenizer (a padded embedding) is "!" in mlx-lm's text too.
            piece = self._tokenmap[token] if token < len(self._tokenmap) else "!"
        if isinstance(piece, bytes):  # SentencePiece: byte tokens already hold their byte
            return piece.replace(SPM_SPACE, b" ")
        if isinstance(piece, str):  # byte-level BPE; added tokens (<|im_end|>) are plain text
            table = byte_level_table()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
            return piece.encode("utf-8")
        return self._tokenizer.decode([token]).encode("utf-8")


def entry(
    token_bytes: TokenBytes, token: int, logprob: float, top: list[tuple[int, float]], keep: Optional[int]
) -> TokenLogprob:
    """One generated token's entry: `top` (id, logprob) pairs, the `keep` best of them."""
    return token_logprob(token_bytes(token), logprob, [(token_bytes(t), v) for t, v in top], keep)
