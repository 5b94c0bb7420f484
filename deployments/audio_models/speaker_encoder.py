"""resemblyzer's GE2E speaker encoder in MLX: a voice as a 256-d unit vector (cosine similarity
near 1 for the same speaker). Weights: `pretrained.pt` of the PyPI package `resemblyzer`
(Apache-2.0), read without torch (deployments/audio_models/torch_legacy.py) into mlx-audio's
GE2E network (Chatterbox's VoiceEncoder: 3 LSTM layers of 256 over 40 mel bands, a linear layer
to 256, ReLU, L2 norm), which has the same shape.

`embed_utterance` does what resemblyzer's `VoiceEncoder.embed_utterance` does after
`preprocess_wav`'s volume normalisation: 16 kHz audio, librosa's mel power spectrogram
(25 ms windows every 10 ms), partial utterances of 160 frames (1.6 s) 1.3 per second, the
L2-normed mean of their embeddings. resemblyzer's webrtcvad silence trimming is left out:
callers pass speech spans (a VAD's, an ASR segment's).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np
from mlx_audio.tts.models.chatterbox_turbo.models.voice_encoder import VoiceEncConfig, VoiceEncoder

from deployments.audio.mel import mel_power_spectrogram
from deployments.audio.resample import resample
from deployments.audio_models import package_file, torch_legacy

PACKAGE = "resemblyzer"
WEIGHTS_FILE = "resemblyzer/pretrained.pt"
RATE = 16000
N_FFT = 400  # 25 ms
HOP = 160  # 10 ms
N_MELS = 40
PARTIAL_FRAMES = 160  # 1.6 s
TARGET_DBFS = -30.0


def encoder_weights(path) -> dict[str, np.ndarray]:
    """resemblyzer's state dict renamed to mlx-audio's VoiceEncoder parameters."""
    state = torch_legacy.load(path)["model_state"]
    out = {
        "proj.weight": state["linear.weight"],
        "proj.bias": state["linear.bias"],
        "similarity_weight": state["similarity_weight"],
        "similarity_bias": state["similarity_bias"],
    }
    for layer in range(3):
        # torch's and MLX's LSTMs share the gate order (i, f, g, o); MLX has one bias.
        out[f"lstm{layer + 1}.Wx"] = state[f"lstm.weight_ih_l{layer}"]
        out[f"lstm{layer + 1}.Wh"] = state[f"lstm.weight_hh_l{layer}"]
        out[f"lstm{layer + 1}.bias"] = state[f"lstm.bias_ih_l{layer}"] + state[f"lstm.bias_hh_l{layer}"]
    return out


def rms_level(samples: np.ndarray, block: int = 1 << 20) -> float:
    """The RMS of `samples`, summed in float64 a block at a time (squaring a 2 h recording in
    one float64 pass took 880 MB beside its samples)."""
    if len(samples) == 0:
        return 0.0
    total = sum(float(np.square(samples[i : i + block], dtype=np.float64).sum()) for i in range(0, len(samples), block))
    return float(np.sqrt(total / len(samples)))


def normalize_volume(samples: np.ndarray, target_dbfs: float = TARGET_DBFS) -> np.ndarray:
    """Raise (never lower) the level to `target_dbfs` RMS, as resemblyzer's preprocessing does."""
    rms = rms_level(samples)
    if rms == 0.0:
        return samples
    gain_db = target_dbfs - 20 * np.log10(rms)
    if gain_db < 0:
        return samples
    # One float32 copy: `(samples * g).astype(np.float32)` made two (878 MB for a 2 h recording).
    return np.multiply(samples, np.float32(10 ** (gain_db / 20)), dtype=np.float32)


def partial_starts(n_samples: int, rate: float = 1.3, min_coverage: float = 0.75) -> list[int]:
    """First mel frame of each 160-frame partial (resemblyzer's compute_partial_slices): one
    every 1/rate s, covering the whole clip; a last partial less than `min_coverage` full is
    dropped unless it is the only one."""
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round(RATE / rate / HOP))
    if not 0 < step <= PARTIAL_FRAMES:
        raise ValueError(f"rate must be between {RATE / (HOP * PARTIAL_FRAMES)} and {RATE / HOP} partials per second")
    starts = list(range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step))
    coverage = (n_samples - starts[-1] * HOP) / (PARTIAL_FRAMES * HOP)
    if coverage < min_coverage and len(starts) > 1:
        starts.pop()
    return starts


class SpeakerEncoder:
    """The pretrained GE2E network, loaded once per process."""

    def __init__(self, path=None):
        self.model = VoiceEncoder(VoiceEncConfig())
        weights = encoder_weights(path or package_file(PACKAGE, WEIGHTS_FILE))
        self.model.load_weights([(k, mx.array(v)) for k, v in weights.items()], strict=True)
        mx.eval(self.model.parameters())

    def embed_partials(self, mels: np.ndarray) -> np.ndarray:
        """[batch, 160, 40] mel power frames -> [batch, 256] unit vectors."""
        return np.array(self.model(mx.array(mels, dtype=mx.float32)), dtype=np.float32)

    def embed_utterance(self, samples: np.ndarray, sample_rate: int, rate: float = 1.3) -> np.ndarray:
        """The voice in `samples` (mono float) as a unit vector of 256 floats."""
        if sample_rate != RATE:
            samples = resample(samples, sample_rate, RATE)
        if len(samples) == 0:
            raise ValueError("cannot embed an empty clip")
        samples = normalize_volume(np.asarray(samples, dtype=np.float32))
        starts = partial_starts(len(samples), rate)
        # Zero-pad so that the last partial has all its frames (resemblyzer pads the same way).
        end = (starts[-1] + PARTIAL_FRAMES) * HOP
        samples = np.pad(samples, (0, max(0, end - len(samples))))
        mel = mel_power_spectrogram(samples, RATE, N_FFT, HOP, N_MELS)
        partials = self.embed_partials(np.stack([mel[s : s + PARTIAL_FRAMES] for s in starts]))
        mean = partials.mean(axis=0)
        norm = np.linalg.norm(mean)
        if norm == 0:
            raise ValueError("the clip holds no voice to embed")
        return mean / norm


@lru_cache(maxsize=1)
def default_encoder() -> SpeakerEncoder:
    return SpeakerEncoder()


def embed_utterance(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """The voice in `samples` as a 256-d unit vector, with the pretrained encoder."""
    return default_encoder().embed_utterance(samples, sample_rate)
