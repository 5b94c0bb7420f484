"""Whisper's log-probability of each token it chose: OpenAI's `include: ["logprobs"]`.

mlx-audio's greedy decoder computes every step's log-probabilities and keeps only their sum
(a window's `avg_logprob`). `decode_with_logprobs` runs the same `DecodingTask` (the batched
encoder and decoder of `model.decode`) with a greedy decoder that also keeps, per step, the
log-probability of the token it chose, after the same logit filters. `segment_logprobs` hands
each of a window's segments the log-probabilities of its own text tokens, and `token_entries`
writes them in OpenAI's shape: the token's text, its log-probability and its UTF-8 bytes (a
token can hold part of a character: the bytes say which).

No Ray here; MLX and mlx-audio are imported when a window is decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Optional

from deployments.protocol.logprobs import byte_level_table, clamp, token_text


def decode_with_logprobs(model: Any, mels: Any, options: Any) -> tuple[list, list[list[float]]]:
    """`model.decode(mels, options)`'s results, and per result the log-probability of each of
    its `tokens` (the sampled tokens before end of text)."""
    import mlx.core as mx
    import numpy as np
    from mlx_audio.stt.models.whisper.decoding import DecodingTask

    task = DecodingTask(model, options)
    decoder = _recording_decoder_class()(options.temperature, task.tokenizer.eot)
    task.decoder = decoder
    results = task.run(mels)
    steps = (
        np.array(mx.stack(decoder.steps, axis=1), dtype=np.float64) if decoder.steps else np.zeros((len(results), 0))
    )
    return results, [steps[row, : len(result.tokens)].tolist() for row, result in enumerate(results)]


@cache
def _recording_decoder_class() -> type:
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.decoding import GreedyDecoder

    class RecordingGreedyDecoder(GreedyDecoder):
        """GreedyDecoder keeping each step's chosen tokens' log-probabilities (row per sequence)."""

        def reset(self) -> None:
            self.steps: list = []

        def update(self, tokens, logits, sum_logprobs):
            tokens, completed, sum_logprobs = super().update(tokens, logits, sum_logprobs)
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            self.steps.append(logprobs[mx.arange(logprobs.shape[0]), tokens[:, -1]])
            return tokens, completed, sum_logprobs

    return RecordingGreedyDecoder


def segment_logprobs(
    tokens: Sequence[int], logprobs: Sequence[float], is_text: Any, segments: Sequence[Sequence[int]]
) -> list[list[float]]:
    """Each segment's text tokens' log-probabilities. `tokens` is the window's decoded sequence
    (text and timestamp tokens), `segments` the text tokens of the segments made from it, in
    order; a segment that was dropped (no text) leaves its tokens unclaimed."""
    text = [(token, logprob) for token, logprob in zip(tokens, logprobs) if is_text(token)]
    out, at = [], 0
    for wanted in segments:
        start = _find(text, list(wanted), at)
        if start is None:  # not found in order: never expected; leave the segment without
            out.append([])
            continue
        out.append([logprob for _, logprob in text[start : start + len(wanted)]])
        at = start + len(wanted)
    return out


def _find(text: list[tuple[int, float]], wanted: list[int], at: int) -> Optional[int]:
    for start in range(at, len(text) - len(wanted) + 1):
        if [token for token, _ in text[start : start + len(wanted)]] == wanted:
            return start
    return None


def token_entries(tokenizer: Any, tokens: Sequence[int], logprobs: Sequence[float]) -> list[dict[str, Any]]:
    """OpenAI's `{"token", "logprob", "bytes"}` per token, written as the LLM writes its own
    (deployments/protocol/logprobs.py: part of a character as `bytes:\\x..`, NaN clamped)."""
    entries = []
    for token, logprob in zip(tokens, logprobs):
        data = _token_bytes(tokenizer, token)
        entries.append({"token": token_text(data), "logprob": clamp(float(logprob)), "bytes": list(data)})
    return entries


def _token_bytes(tokenizer: Any, token: int) -> bytes:
    """A byte-level BPE token's bytes (Whisper's vocabulary is GPT-2's byte alphabet)."""
    hf = getattr(tokenizer, "hf_tokenizer", None)
    if hf is not None:
        piece = hf.convert_ids_to_tokens(int(token))
        table = byte_level_table()
        if piece and all(ch in table for ch in piece):
            return bytes(table[ch] for ch in piece)
    return tokenizer.decode([token]).encode("utf-8")
