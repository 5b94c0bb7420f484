"""Silero VAD v6 in MLX, with the weights that the PyPI package `silero-vad` (MIT) ships.

The model takes 512-sample windows of 16 kHz audio (32 ms), each preceded by the 64 samples
before it, and gives one speech probability per window; an LSTM carries state from window to
window. Weights are read from the package's `silero_vad_16k_op15.onnx` (the same network its
onnxruntime path runs; the package's safetensors holds a different, older weight set) into
mlx-audio's Silero branch. Everything before the LSTM depends on one window only, so all
windows go through the STFT and the convolutions as one batch and only the LSTM steps in order:
seconds of audio cost milliseconds.

A live stream's `feed` evaluates the same weights with numpy instead: MLX runs one CPU op
queue per process, so in an ASR replica whose Whisper pass is running, an MLX VAD step waits
for the pass (a session's chunk round trip became the pass's, up to seconds); numpy runs
beside it in milliseconds. `feed` and `probabilities` agree to 1e-5 (tested).

`speech_regions` / `split_for_decoding` have the signatures of the energy VAD's
(deployments/audio/vad.py), so the ASR engine can use either.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_audio.vad.models.silero_vad.config import BranchConfig
from mlx_audio.vad.models.silero_vad.silero_vad import SileroVADBranch, _reflect_pad_right

from deployments.audio.resample import resample
from deployments.audio.vad import Chunk, VADConfig, pack_for_decoding, spans_from_probabilities
from deployments.audio_models import package_file

PACKAGE = "silero-vad"
ONNX_FILE = "silero_vad/data/silero_vad_16k_op15.onnx"
RATE = 16000
WINDOW = 512
CONTEXT = 64
BLOCK_WINDOWS = 1875  # windows per pass over a whole recording: 60 s
LOG_EVERY_S = 600  # a progress line per this much audio of a long recording
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SileroConfig:
    """silero-vad's `get_speech_timestamps` defaults, in seconds, plus the decoding chunk size."""

    threshold: float = 0.5
    neg_threshold: float | None = None  # speech ends below this; None: threshold - 0.15
    min_speech_s: float = 0.25
    min_silence_s: float = 0.1
    pad_s: float = 0.03
    max_chunk_s: float = 30.0


def onnx_weights(path) -> dict[str, np.ndarray]:
    """The ONNX initializers renamed and laid out as mlx-audio's SileroVADBranch parameters."""
    import onnx
    from onnx import numpy_helper

    src = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    out = {"stft_conv.weight": conv(src["model.stft.forward_basis_buffer"])}
    for i in range(4):
        out[f"conv{i + 1}.weight"] = conv(src[f"model.encoder.{i}.reparam_conv.weight"])
        out[f"conv{i + 1}.bias"] = src[f"model.encoder.{i}.reparam_conv.bias"]
    out["final_conv.weight"] = conv(src["model.decoder.decoder.2.weight"])
    out["final_conv.bias"] = src["model.decoder.decoder.2.bias"]
    # torch's LSTMCell and MLX's LSTM share the gate order (i, f, g, o); MLX has one bias.
    out["lstm.Wx"] = src["model.decoder.rnn.weight_ih"]
    out["lstm.Wh"] = src["model.decoder.rnn.weight_hh"]
    out["lstm.bias"] = src["model.decoder.rnn.bias_ih"] + src["model.decoder.rnn.bias_hh"]
    return out


def conv(weight: np.ndarray) -> np.ndarray:
    """A torch Conv1d weight (out, in, kernel) in MLX's layout (out, kernel, in)."""
    return np.ascontiguousarray(weight.transpose(0, 2, 1))


def windows(samples: np.ndarray, context: np.ndarray | None = None) -> np.ndarray:
    """[n_windows, CONTEXT + WINDOW]: each 512-sample window with the 64 samples before it
    (`context`, or zeros, before the start; the last window zero-padded), as silero-vad frames
    its input."""
    n = -(-len(samples) // WINDOW)
    padded = np.zeros(CONTEXT + n * WINDOW, dtype=np.float32)
    if context is not None:
        padded[:CONTEXT] = context
    padded[CONTEXT : CONTEXT + len(samples)] = samples
    starts = np.arange(n) * WINDOW
    return padded[starts[:, None] + np.arange(CONTEXT + WINDOW)]


@dataclass(frozen=True)
class StreamState:
    """What `SileroVAD.feed` carries from one chunk of a stream to the next (16 kHz samples)."""

    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT, np.float32))
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # < one window
    lstm: tuple | None = None  # (hidden, cell) after the last window


class SileroVAD:
    """The 16 kHz Silero network with the package's weights, loaded once per process."""

    def __init__(self, path=None):
        self.branch = SileroVADBranch(BranchConfig())
        weights = onnx_weights(path or package_file(PACKAGE, ONNX_FILE))
        self.branch.load_weights([(k, mx.array(v)) for k, v in weights.items()], strict=True)
        mx.eval(self.branch.parameters())
        self.numpy = NumpyBranch(weights, self.branch.config)

    def probabilities(self, samples: np.ndarray, rate: int = RATE) -> np.ndarray:
        """Speech probability of each 32 ms window of `samples` (mono float32)."""
        if rate != RATE:
            samples = resample(samples, rate, RATE)
        if len(samples) == 0:
            return np.zeros(0, dtype=np.float32)
        # In blocks, the LSTM's state carried from one to the next: the same probabilities as
        # one pass, with memory bounded by a block whatever the recording's length.
        out, lstm, step, logged = [], None, BLOCK_WINDOWS * WINDOW, 0
        for start in range(0, len(samples), step):
            context = samples[start - CONTEXT : start] if start else None
            probs, lstm = self._run(windows(samples[start : start + step], context), lstm)
            out.append(probs)
            if start - logged >= LOG_EVERY_S * RATE:  # a long recording shows its progress
                logger.info("Voice activity: %.0f s of %.0f s of audio", start / RATE, len(samples) / RATE)
                logged = start
        return np.concatenate(out)

    def feed(self, samples: np.ndarray, state: StreamState | None = None) -> tuple[np.ndarray, StreamState]:
        """Probabilities of the whole windows that 16 kHz `samples` complete in a stream, and the
        state for the next call: fed in pieces of any size, a stream gets the probabilities that
        `probabilities` gives for the whole of it (but for its last, partial window)."""
        state = state or StreamState()
        buffer = np.concatenate([state.pending, np.asarray(samples, dtype=np.float32)])
        whole = len(buffer) // WINDOW * WINDOW
        if whole == 0:
            return np.zeros(0, dtype=np.float32), replace(state, pending=buffer)
        probs, lstm = self.numpy.run(windows(buffer[:whole], state.context), state.lstm)
        return probs, StreamState(buffer[whole - CONTEXT : whole], buffer[whole:], lstm)

    def _run(self, batch: np.ndarray, lstm: tuple | None) -> tuple[np.ndarray, tuple]:
        """Probabilities of a batch of framed windows, starting from LSTM state `lstm`."""
        features = self._encode(mx.array(batch))  # [n, 1, 128]: one step per window
        hidden, cell = self.branch.lstm(features.reshape(1, -1, features.shape[-1]), *(lstm or ()))
        probs = mx.sigmoid(self.branch.final_conv(nn.relu(hidden)))
        return np.array(probs, dtype=np.float32).reshape(-1), (hidden[:, -1], cell[:, -1])

    def _encode(self, x: mx.array) -> mx.array:
        """SileroVADBranch's layers before the LSTM, over a batch of windows."""
        b = self.branch
        x = b.stft_conv(_reflect_pad_right(x, b.config.pad)[..., None])
        real, imag = x[..., : b.config.cutoff], x[..., b.config.cutoff :]
        x = mx.sqrt(real * real + imag * imag)
        for conv in (b.conv1, b.conv2, b.conv3, b.conv4):
            x = nn.relu(conv(x))
        return x


class NumpyBranch:
    """mlx-audio's SileroVADBranch forward pass over the same weights (MLX layouts), in numpy:
    convolutions as products of their unfolded inputs, the LSTM one window at a time."""

    def __init__(self, weights: dict[str, np.ndarray], config: BranchConfig):
        self.w = {k: np.asarray(v, np.float32) for k, v in weights.items()}
        self.config = config

    def run(self, batch: np.ndarray, lstm: tuple | None) -> tuple[np.ndarray, tuple]:
        """Probabilities of framed windows [n, CONTEXT + WINDOW], from LSTM state `lstm`."""
        cfg, w = self.config, self.w
        x = np.concatenate([batch, batch[:, -2 : -cfg.pad - 2 : -1]], axis=1)[..., None]  # reflect right
        x = conv1d(x, w["stft_conv.weight"], None, stride=cfg.hop_length, padding=0)
        x = np.sqrt(x[..., : cfg.cutoff] ** 2 + x[..., cfg.cutoff :] ** 2)
        for i, stride in ((1, 1), (2, 2), (3, 2), (4, 1)):
            x = np.maximum(conv1d(x, w[f"conv{i}.weight"], w[f"conv{i}.bias"], stride=stride, padding=1), 0)
        gates = x.reshape(-1, x.shape[-1]) @ w["lstm.Wx"].T + w["lstm.bias"]  # one step per window
        hidden, cell = (np.asarray(s, np.float32).reshape(1, -1) for s in lstm) if lstm else (None, None)
        outputs = []
        for step in gates:
            ifgo = step[None] if hidden is None else step[None] + hidden @ w["lstm.Wh"].T
            i, f, g, o = np.split(ifgo, 4, axis=-1)
            i, f, o, g = _sigmoid(i), _sigmoid(f), _sigmoid(o), np.tanh(g)
            cell = i * g if cell is None else f * cell + i * g
            hidden = o * np.tanh(cell)
            outputs.append(hidden)
        hidden_all = np.maximum(np.concatenate(outputs), 0)
        final = hidden_all @ w["final_conv.weight"][:, 0, :].T + w["final_conv.bias"]
        return _sigmoid(final).reshape(-1).astype(np.float32), (hidden, cell)


def conv1d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, stride: int, padding: int) -> np.ndarray:
    """MLX's conv1d: x [n, length, in], weight [out, kernel, in] -> [n, out_length, out]."""
    out, kernel, _ = weight.shape
    if padding:
        x = np.pad(x, ((0, 0), (padding, padding), (0, 0)))
    length = (x.shape[1] - kernel) // stride + 1
    starts = np.arange(length) * stride
    patches = x[:, starts[:, None] + np.arange(kernel)]  # [n, out_length, kernel, in]
    y = patches.reshape(x.shape[0], length, -1) @ weight.reshape(out, -1).T
    return y if bias is None else y + bias


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@lru_cache(maxsize=1)
def default_vad() -> SileroVAD:
    return SileroVAD()


def speech_regions(samples: np.ndarray, rate: int, config: SileroConfig = SileroConfig()) -> list[Chunk]:
    """Spans of `samples` (at `rate`) that hold speech, padded, in order, in samples at `rate`."""
    probs = default_vad().probabilities(samples, rate)
    n_16k = round(len(samples) * RATE / rate)
    spans = spans_from_probabilities(
        probs, n_16k, WINDOW, RATE, config.threshold, config.neg_threshold,
        config.min_speech_s, config.min_silence_s, config.pad_s,
    )  # fmt: skip
    scale = rate / RATE
    return [Chunk(round(c.start * scale), min(len(samples), round(c.end * scale))) for c in spans]


def split_for_decoding(samples: np.ndarray, rate: int, config: SileroConfig = SileroConfig()) -> list[Chunk]:
    """Chunks of at most `max_chunk_s` that cover every speech region (long ones cut at pauses)."""
    regions = speech_regions(samples, rate, config)
    return pack_for_decoding(samples, regions, rate, VADConfig(max_chunk_s=config.max_chunk_s))


def speech_segments(
    samples: np.ndarray, rate: int = RATE, config: SileroConfig = SileroConfig()
) -> list[tuple[float, float]]:
    """(start, end) in seconds of each speech span."""
    return [c.seconds(rate) for c in speech_regions(samples, rate, config)]
