"""Kokoro voice fitting: a style that makes Kokoro sound like a reference clip.

Kokoro has no reference encoder: it speaks with a 256-d style vector (a voice pack
[510, 1, 256] holds one per phoneme count; the first 128 numbers condition the decoder's
timbre, the last 128 the prosody predictor). Voice training fits that style to a clip by
gradient descent on 1 - cos(GE2E(Kokoro(text, style)), GE2E(reference)), where GE2E is the
project's MLX speaker encoder (deployments/audio_models/speaker_encoder.py):

- the style is a softmax blend of the stock voices (logits, one per voice) plus a small free
  residual, so a fitted voice is a full pack [510, 1, 256] like a stock one (the blend weights
  apply to every row; the residual is added to every row) and speaks any text length;
- it starts from the stock voices nearest to the reference by GE2E similarity (their logits
  raised), which is also the baseline the fit must beat;
- Kokoro's durations are rounded (not differentiable): they are computed once with the start
  style and kept, so each step runs the differentiable rest (prosody predictor's F0 and energy,
  the decoder) and its gradient with `mx.value_and_grad`;
- the speaker encoder's front end (resample to 16 kHz, librosa's mel power) is redone here in
  MLX ops: at 24 kHz a 600-point window every 240 samples covers the same 25 ms every 10 ms,
  and its first 201 bins are the 16 kHz FFT's bins (40 Hz apart), so the 16 kHz mel filterbank
  applies to them directly, scaled by (400/600)^2 for the longer window.

A step is one forward and backward pass over ~2.5 s of speech (about 40 s of CPU on the
project's 2-core box, docs/api/speech.md); `steps` and `score_stock` yield after each step or
stock voice, so the caller checks cancellation between them.
No Ray here; MLX and mlx-audio's Kokoro.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from deployments.audio.mel import mel_filterbank
from deployments.audio_models import speaker_encoder as ge2e
from deployments.similarity import cosine

RATE = 24000  # Kokoro's output rate
N_FFT = ge2e.N_FFT * RATE // ge2e.RATE  # 600: 25 ms at 24 kHz
HOP = ge2e.HOP * RATE // ge2e.RATE  # 240: 10 ms
N_BINS = ge2e.N_FFT // 2 + 1  # the 16 kHz FFT's 201 bins, 0..8 kHz
# The fitting sentence: ~2.5 s of speech, two GE2E partials; every step synthesises it.
FIT_TEXT = "The quick brown fox jumps over the lazy dog."
START_TOP = 3  # stock voices whose logits start raised
RESIDUAL_LIMIT = 0.1  # the residual's size relative to the stock styles' spread (tanh-bounded)


# ---------------------------------------------------------------------------- GE2E in MLX


@dataclass
class _Front:
    window: mx.array  # [N_FFT] periodic Hann
    cos: mx.array  # [N_FFT, N_BINS]
    sin: mx.array
    mel: mx.array  # [N_BINS, N_MELS]


def _front() -> _Front:
    n = np.arange(N_FFT)
    k = np.arange(N_BINS)
    angle = 2 * np.pi * np.outer(n, k) / N_FFT
    scale = (ge2e.N_FFT / N_FFT) ** 2
    return _Front(
        window=mx.array(0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT), dtype=mx.float32),
        cos=mx.array(np.cos(angle), dtype=mx.float32),
        sin=mx.array(-np.sin(angle), dtype=mx.float32),
        mel=mx.array(mel_filterbank(ge2e.RATE, ge2e.N_FFT, ge2e.N_MELS).T * scale, dtype=mx.float32),
    )


def embed_mx(encoder: ge2e.SpeakerEncoder, front: _Front, audio: mx.array) -> mx.array:
    """GE2E embedding of 24 kHz `audio` (1-D), differentiable: what `embed_utterance` computes
    on the same clip resampled to 16 kHz (volume normalisation, partials, L2-normed mean)."""
    rms = mx.sqrt(mx.mean(audio * audio) + 1e-12)
    gain = mx.maximum(1.0, 10 ** (ge2e.TARGET_DBFS / 20) / rms)  # raise, never lower
    audio = audio * mx.stop_gradient(gain)
    n16 = int(round(audio.shape[0] * ge2e.RATE / RATE))
    starts = ge2e.partial_starts(n16)
    n_frames = starts[-1] + ge2e.PARTIAL_FRAMES
    end = (n_frames - 1) * HOP + N_FFT
    padded = mx.pad(audio, [(N_FFT // 2, 0)])
    padded = mx.pad(padded, [(0, max(0, end - padded.shape[0]))])[:end]
    index = mx.arange(n_frames)[:, None] * HOP + mx.arange(N_FFT)[None, :]
    frames = padded[index] * front.window
    power = (frames @ front.cos) ** 2 + (frames @ front.sin) ** 2
    mel = power @ front.mel  # [frames, 40]
    partials = mx.stack([mel[s : s + ge2e.PARTIAL_FRAMES] for s in starts])
    embeds = encoder.model(partials)
    mean = embeds.mean(axis=0)
    return mean / (mx.linalg.norm(mean) + 1e-9)


# ---------------------------------------------------------------------------- Kokoro pieces


def phonemes(model, text: str, lang_code: str = "a") -> str:
    """Kokoro's phonemes for `text` (its first chunk: at most 510 phonemes)."""
    pipeline = model._get_pipeline(lang_code)
    if lang_code in "ab":
        _, tokens = pipeline.g2p(text)
        for _, ps, _ in pipeline.en_tokenize(tokens):
            if ps:
                return ps
        raise ValueError(f"no phonemes for {text!r}")
    ps, _ = pipeline.g2p(text)
    return ps[:510]


class _Utterance:
    """Kokoro's style-independent work for one phoneme string, done once: token ids, BERT
    features, the text encoder; `align` fixes the durations (from a start style)."""

    def __init__(self, model, ps: str):
        self.model = model
        ids = [i for i in (model.vocab.get(p) for p in ps) if i is not None]
        self.n_phonemes = len(ps)
        self.ids = mx.array([[0, *ids, 0]])
        n = self.ids.shape[1]
        self.lengths = mx.array([n])
        self.mask = mx.zeros((1, n), dtype=mx.bool_)
        bert, _ = model.bert(self.ids, attention_mask=mx.ones((1, n), dtype=mx.int32))
        self.d_en = model.bert_encoder(bert).transpose(0, 2, 1)
        self.t_en = model.text_encoder(self.ids, self.lengths, self.mask)
        mx.eval(self.d_en, self.t_en)
        self.alignment: Optional[mx.array] = None

    def _prosody(self, style: mx.array) -> mx.array:
        return self.model.predictor.text_encoder(self.d_en, style[:, 128:], self.lengths, self.mask)

    def align(self, style: mx.array) -> None:
        """Durations as Kokoro predicts them for `style` (speed 1), as a fixed alignment."""
        d = self._prosody(style)
        x, _ = self.model.predictor.lstm(d)
        duration = mx.sigmoid(self.model.predictor.duration_proj(x)).sum(axis=-1)
        frames = np.clip(np.round(np.array(duration[0])), 1, 100).astype(int)
        alignment = np.zeros((self.ids.shape[1], int(frames.sum())), dtype=np.float32)
        alignment[np.repeat(np.arange(len(frames)), frames), np.arange(int(frames.sum()))] = 1
        self.alignment = mx.array(alignment)[None]

    def __call__(self, style: mx.array) -> mx.array:
        """The audio (1-D, 24 kHz) for `style` [1, 256] with the fixed durations."""
        d = self._prosody(style)
        en = d.transpose(0, 2, 1) @ self.alignment
        f0, energy = self.model.predictor.F0Ntrain(en, style[:, 128:])
        asr = self.t_en @ self.alignment
        return self.model.decoder(asr, f0, energy, style[:, :128])[0].reshape(-1)


# ---------------------------------------------------------------------------- the fit


class StyleBlend(nn.Module):
    """softmax(logits) . stock styles + a bounded residual."""

    def __init__(self, n_voices: int, spread: np.ndarray):
        super().__init__()
        self.logits = mx.zeros((n_voices,))
        self.residual = mx.zeros((256,))
        self._spread = mx.array(spread * RESIDUAL_LIMIT, dtype=mx.float32)

    def weights(self) -> mx.array:
        return mx.softmax(self.logits)

    def offset(self) -> mx.array:
        return mx.tanh(self.residual) * self._spread

    def __call__(self, rows: mx.array) -> mx.array:
        """rows: [n_voices, 256] (the stock styles at one phoneme count) -> [1, 256]."""
        return (self.weights() @ rows + self.offset())[None]


@dataclass
class FitStep:
    step: int
    loss: float  # 1 - cosine similarity to the reference
    seconds: float


class KokoroVoiceFit:
    """One fit: `start()` picks the start from the stock voices, `steps(n)` runs Adam steps
    (a generator: one yield per step), `pack()` is the fitted voice pack."""

    def __init__(
        self,
        model,
        encoder: ge2e.SpeakerEncoder,
        packs: dict[str, np.ndarray],
        reference: np.ndarray,
        text: str = FIT_TEXT,
        lang_code: str = "a",
        residual: bool = True,
        learning_rate: float = 0.3,
        seed: int = 0,
    ):
        self.model, self.encoder, self.seed = model, encoder, seed
        self.names = sorted(packs)
        self.packs = np.stack([packs[n].reshape(-1, 256) for n in self.names]).astype(np.float32)  # [V, 510, 256]
        self.front = _front()
        self.target = mx.array(encoder.embed_utterance(np.asarray(reference, dtype=np.float32), RATE))
        ps = phonemes(model, text, lang_code)
        self.key = hashlib.sha256(f"{ps}|{seed}".encode()).hexdigest()[:16]  # what stock embeddings depend on
        self.utterance = _Utterance(model, ps)
        row = min(self.utterance.n_phonemes, self.packs.shape[1]) - 1
        self.rows = mx.array(self.packs[:, row])
        self.blend = StyleBlend(len(self.names), self.packs.std(axis=0).mean(axis=0))
        self.residual = residual
        self.optimizer = optim.Adam(learning_rate=learning_rate)
        self.stock_similarity: dict[str, float] = {}
        self.losses: list[FitStep] = []

    def _loss(self, blend: StyleBlend) -> mx.array:
        return 1.0 - (self._embed(blend(self.rows)) * self.target).sum()

    def _embed(self, style: mx.array) -> mx.array:
        mx.random.seed(self.seed)  # the decoder's noise source: the same in every step
        return embed_mx(self.encoder, self.front, self.utterance(style))

    def similarity(self, style: Optional[mx.array] = None) -> float:
        """Cosine similarity to the reference of `style` (default: the blend now)."""
        style = self.blend(self.rows) if style is None else style
        return float((self._embed(style) * self.target).sum())

    def score_stock(self, cache: Optional[dict[str, np.ndarray]] = None) -> Iterator[int]:
        """Each stock voice's similarity to the reference (the utterance aligned per voice),
        one yield per voice. `cache` keeps the stock voices' embeddings across fits (they do
        not depend on the reference): a later fit only takes dot products."""
        cache = {} if cache is None else cache
        for i, name in enumerate(self.names):
            if name not in cache:
                style = self.rows[i][None]
                self.utterance.align(style)
                cache[name] = np.array(self._embed(style))
            self.stock_similarity[name] = cosine(cache[name], np.array(self.target))
            yield i

    def start(self) -> str:
        """The nearest stock voice; the blend starts around the START_TOP nearest (scores
        every stock voice first if `score_stock` has not)."""
        for _ in self.score_stock() if len(self.stock_similarity) < len(self.names) else ():
            pass
        ranked = sorted(self.stock_similarity, key=self.stock_similarity.get, reverse=True)
        logits = np.zeros(len(self.names), dtype=np.float32)
        for rank, name in enumerate(ranked[:START_TOP]):
            logits[self.names.index(name)] = 6.0 - rank
        self.blend.logits = mx.array(logits)
        self.utterance.align(self.blend(self.rows))
        return ranked[0]

    def steps(self, n: int) -> Iterator[FitStep]:
        params = ["logits", "residual"] if self.residual else ["logits"]
        value_and_grad = nn.value_and_grad(self.blend, self._loss)
        for _ in range(n):
            t0 = time.perf_counter()
            loss, grads = value_and_grad(self.blend)
            grads = {k: v for k, v in grads.items() if k in params}
            self.optimizer.update(self.blend, grads)
            mx.eval(self.blend.parameters(), self.optimizer.state, loss)
            step = FitStep(len(self.losses), float(loss), time.perf_counter() - t0)
            self.losses.append(step)
            yield step

    def pack(self) -> np.ndarray:
        """The fitted voice pack [510, 1, 256] (float32), as Kokoro loads a stock voice."""
        weights = np.array(self.blend.weights())
        pack = np.tensordot(weights, self.packs, axes=1) + np.array(self.blend.offset())
        return pack.reshape(-1, 1, 256).astype(np.float32)

    def weights(self) -> dict[str, float]:
        w = np.array(self.blend.weights())
        return {self.names[i]: round(float(w[i]), 4) for i in np.argsort(-w)[:5]}


def read_stock_cache(path: Optional[Path], key: str) -> dict[str, np.ndarray]:
    """The stock voices' embeddings saved by an earlier fit with the same sentence (or none)."""
    try:
        with np.load(path) as data:
            if str(data["key"]) != key:
                return {}
            return {name: data[name] for name in data.files if name != "key"}
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: recompute
        return {}


def write_stock_cache(path: Path, key: str, embeddings: dict[str, np.ndarray]) -> None:
    from deployments.voices.registry import atomic_write

    buffer = io.BytesIO()
    np.savez(buffer, key=np.array(key), **embeddings)
    try:
        atomic_write(Path(path), buffer.getvalue())
    except OSError:  # a read-only place: the next fit recomputes them
        pass


def load_packs(voices_dir: Path) -> dict[str, np.ndarray]:
    return {p.stem: np.array(mx.load(str(p))["voice"]) for p in sorted(Path(voices_dir).glob("*.safetensors"))}
