"""Where one Kokoro-82M synthesis spends its time on MLX's CPU backend, per module and op.

One ~5 s English sentence (the shipped model and voice, the CPU kernels installed as a TTS
replica has them), timed with bench/profile.py's evaluation barriers: mlx-audio's Kokoro
modules (ALBERT, the prosody predictor, its LSTMs, the decoder's AdaIN residual blocks, the
iSTFTNet generator and its harmonic source), the STFT/iSTFT and every convolution by shape.
`python -m bench.profile kokoro`; the table is in docs/performance.md ("Profiles").
"""

from __future__ import annotations

import time
from pathlib import Path

# About 5 s of speech with af_heart.
SENTENCE = "The quick brown fox jumps over the lazy dog, and then it rests in the warm afternoon sun."


def kokoro_profiler():
    """A Profiler over Kokoro's modules and ops (install the CPU kernels first: the conv ops
    are wrapped as they are at this moment)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_audio.tts.models.kokoro import istftnet, kokoro, modules

    from bench.profile import Profiler, conv_label

    profiler = Profiler()
    for cls in (
        kokoro.Model,
        modules.CustomAlbert,
        modules.TextEncoder,
        modules.DurationEncoder,
        modules.AdaLayerNorm,
        modules.LSTM,
        istftnet.Decoder,
        istftnet.AdainResBlk1d,
        istftnet.AdaIN1d,
        istftnet.InstanceNorm1d,
        istftnet.Generator,
        istftnet.AdaINResBlock1,
        istftnet.ConvWeighted,
        istftnet.SourceModuleHnNSF,
    ):
        profiler.module(cls)
    profiler.function(modules.ProsodyPredictor, "F0Ntrain", "ProsodyPredictor.F0Ntrain")
    profiler.function(istftnet.MLXSTFT, "transform", "STFT (harmonic source)")
    profiler.function(istftnet.MLXSTFT, "inverse", "iSTFT (output)")
    profiler.function(nn.Linear, "__call__", "Linear")
    profiler.function(mx, "conv1d", conv_label("conv1d"))
    profiler.function(mx, "conv_transpose1d", conv_label("conv_transpose1d"))
    return profiler


def load(cache_dir: Path):
    """The shipped model as a TTS replica loads it (kernels installed, G2P offline)."""
    import mlx.core as mx
    from mlx_audio.tts.utils import load_model

    from deployments.tts.kokoro import ensure_kokoro
    from deployments.tts.model_hooks import before_load

    model_dir = ensure_kokoro(cache_dir)
    before_load(model_dir)
    model = load_model(model_dir)
    pipeline = model._get_pipeline("a")
    _, tokens = pipeline.g2p(SENTENCE)
    phonemes = " ".join(ps for _, ps, _ in pipeline.en_tokenize(tokens) if ps)
    style = mx.load(str(model_dir / "voices" / "af_heart.safetensors"))["voice"][len(phonemes) - 1]
    return model, phonemes, style


def synthesize(model, phonemes, style):
    import mlx.core as mx

    mx.random.seed(0)
    return model(phonemes, style)


def profile_kokoro(cache_dir: Path, repeats: int) -> dict:
    from bench.profile import clock

    model, phonemes, style = load(cache_dir)
    audio = synthesize(model, phonemes, style)  # warm-up
    plain, wall = [], []
    for _ in range(repeats):
        t0, w0 = clock(), time.perf_counter()
        audio = synthesize(model, phonemes, style)
        plain.append(clock() - t0)
        wall.append(time.perf_counter() - w0)
    profiler = kokoro_profiler()
    try:
        with profiler.active():
            for _ in range(repeats):
                synthesize(model, phonemes, style)
        rows = profiler.rows(repeats)
    finally:
        profiler.restore()
    audio_s = audio.size / 24000
    synthesis_s = sorted(plain)[len(plain) // 2]
    return {
        "sentence": SENTENCE,
        "phonemes": len(phonemes),
        "audio_s": audio_s,
        "repeats": repeats,
        "synthesis_s_unbarriered": synthesis_s,
        "synthesis_wall_s_unbarriered": sorted(wall)[len(wall) // 2],
        "rtf_unbarriered": synthesis_s / audio_s,
        "synthesis_s_profiled": sum(r["exclusive_ms"] for r in rows) / 1e3,
        "rows": rows,
    }
