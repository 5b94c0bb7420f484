"""Partial hypotheses of a live utterance: Whisper's encoder over the audio's real length.

Whisper is trained on 30 s windows, and a file's window is padded to 30 s. A live session's
partial is a provisional hypothesis of the 0.5-30 s the person has said so far, refreshed every
half second: padding 2 s of speech to 30 s makes the encoder (attention over 1500 positions; on
MLX's CPU backend its softmax dominates) do ~15x the work. For a partial the encoder runs over
the audio plus a margin of silence (whisper.cpp's `audio_ctx`), and the decoder runs greedy,
without timestamps, with a token cap that follows the audio's length.

Shortened contexts make Whisper loop ("The quick. The quick. The quick.") below a few seconds,
so the context is at least `MIN_CONTEXT_S`, the token cap bounds what a loop can cost, and
`collapse_repeats` keeps one copy of a phrase the decoder repeated back to back.
Measured with whisper-tiny.en on the 2-core box (docs/api/streaming-asr.md): 0.22-0.40 s per
partial for 0.5-3.7 s of speech, against 1.3-1.45 s for the padded window, same words.

Finals never take this path: a finalised utterance decodes the padded window, exactly as the
same audio sent as a file (MiniInfer's promise, tested).

No Ray here; MLX and mlx-audio are imported when a hypothesis is made.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

RATE = 16000
HOP = 160  # samples per mel frame (Whisper's HOP_LENGTH)
FULL_FRAMES = 3000  # 30 s: Whisper's window
MARGIN_S = 1.0  # silence after the speech: Whisper expects the window to go on past the words
MIN_CONTEXT_S = 5.0  # shorter contexts loop (measured: 3 s loops on 0.5-1.5 s of speech)
TOKENS_PER_S = 6  # a fast speaker says ~4 tokens a second; the cap leaves room
MIN_TOKENS = 8


def context_frames(samples: int) -> int:
    """Mel frames the encoder sees for `samples` of audio: the audio, the margin, at least
    MIN_CONTEXT_S, at most the 30 s window, and even (the second conv has stride 2)."""
    wanted = max(samples + int(MARGIN_S * RATE), int(MIN_CONTEXT_S * RATE)) // HOP
    return min(FULL_FRAMES, wanted + wanted % 2)


def token_cap(samples: int) -> int:
    return MIN_TOKENS + int(TOKENS_PER_S * samples / RATE)


def collapse_repeats(text: str, longest: int = 12) -> str:
    """`text` with every phrase of 2-`longest` words said twice or more in a row kept once
    ("it is the first and it is the first and" -> "it is the first and"): a hypothesis's
    loop, never a speaker's (the final decodes the padded window)."""
    words = text.split()
    keys = [re.sub(r"[^\w']", "", w.lower()) for w in words]  # "quick." repeats "quick"
    changed = True
    while changed:
        changed = False
        for n in range(2, min(longest, len(words) // 2) + 1):
            i = 0
            while i + 2 * n <= len(words):
                if keys[i : i + n] == keys[i + n : i + 2 * n]:
                    del words[i + n : i + 2 * n], keys[i + n : i + 2 * n]
                    changed = True
                else:
                    i += 1
    return " ".join(words)


def encode(model: Any, mel: Any) -> Any:
    """mlx-audio's `AudioEncoder.__call__` over `mel` [batch, frames, n_mels] of any even
    length up to 3000 frames: its positional embedding cut to the length (mlx-audio asserts
    the full length). At 3000 frames this is the encoder itself (tested)."""
    import mlx.nn as nn

    encoder = model.encoder
    x = nn.gelu(encoder.conv1(mel))
    x = nn.gelu(encoder.conv2(x))
    x = x + encoder._positional_embedding[: x.shape[1]]
    for block in encoder.blocks:
        x, _, _ = block(x)
    return encoder.ln_post(x)


def hypothesis(model: Any, audio: np.ndarray, *, language: str | None, prompt: str | None, task: str) -> Any:
    """Whisper's greedy hypothesis of `audio` (16 kHz mono float32) over a shortened context:
    mlx-audio's DecodingResult (text, no_speech_prob, avg_logprob)."""
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.audio import N_SAMPLES, log_mel_spectrogram
    from mlx_audio.stt.models.whisper.decoding import DecodingOptions, DecodingTask

    class EncodedDecoding(DecodingTask):
        def _get_audio_features(self, mel):  # the features are given: the encoder ran already
            return mel

    mel = log_mel_spectrogram(mx.array(audio), n_mels=model.dims.n_mels, padding=N_SAMPLES)
    mel = mel[: context_frames(len(audio))].astype(model.dtype)
    options = DecodingOptions(
        task=task,
        language=language,
        temperature=0.0,
        prompt=prompt or None,
        without_timestamps=True,
        sample_len=token_cap(len(audio)),
        fp16=model.dtype == mx.float16,
    )
    return EncodedDecoding(model, options).run(encode(model, mel[None]))[0]
