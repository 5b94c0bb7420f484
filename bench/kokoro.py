"""Kokoro-82M on the CPU: MLX's own convolutions vs the GEMM kernels, and onnxruntime.

`python -m bench.kokoro [--repeats N]` (or `python -m bench --scenarios kokoro`), in one process:
1. single ops at Kokoro's layer shapes (a ~4 s utterance): MLX's `conv1d`/`conv_transpose1d`
   against deployments/kernels' GEMM forms, with the largest difference between them;
2. the whole acoustic model on the same phonemes and voice, four ways: stock mlx-audio (MLX's
   convolutions), mlx-audio with the GEMM convolutions only, with all the CPU kernels (GEMM and
   FFT convolutions, fused AdaIN + Snake: what a TTS replica runs), and onnxruntime on the int8 ONNX export
   the weights come from (the best CPU runtime for that file). G2P (misaki) is the same for all
   three and timed apart. RTF = synthesis time / audio duration (lower is faster).
Results: bench/results/kokoro.json and kokoro.md. Needs the `bench` extra (onnxruntime).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.report import save_standalone, table

ROOT = Path(__file__).resolve().parents[1]
TEXT = (
    "The quick brown fox jumps over the lazy dog, and then it rests in the warm afternoon sun. "
    "Please schedule the meeting for Tuesday."
)
VOICE = "af_heart"
# (op, input shape, weight shape, kwargs): the generator's dilated resblocks, its upsampling
# transposed convs, a decoder block's 3-tap conv and the prosody predictor's depthwise pool.
OPS = [
    ("conv1d", (1, 1600, 256), (256, 7, 256), {"padding": 9, "dilation": 3}),
    ("conv1d", (1, 9600, 128), (128, 11, 128), {"padding": 25, "dilation": 5}),
    ("conv1d", (1, 160, 1090), (1024, 3, 1090), {"padding": 1}),
    ("conv_transpose1d", (1, 160, 512), (256, 20, 512), {"stride": 10, "padding": 5}),
    ("conv_transpose1d", (1, 1600, 256), (128, 12, 256), {"stride": 6, "padding": 3}),
    ("conv_transpose1d", (1, 80, 512), (512, 3, 1), {"stride": 2, "groups": 512}),
]


def _best(fn: Callable, repeats: int) -> float:
    import mlx.core as mx

    mx.eval(fn())
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mx.eval(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def bench_ops(repeats: int) -> list[dict]:
    import mlx.core as mx

    from deployments.kernels import conv

    rows = []
    for name, x_shape, w_shape, kwargs in OPS:
        x, w = mx.random.normal(x_shape), mx.random.normal(w_shape)
        mlx_op, gemm_op = conv.original_op(name), getattr(conv, name)
        t_mlx = _best(lambda: mlx_op(x, w, **kwargs), repeats)
        t_gemm = _best(lambda: gemm_op(x, w, **kwargs), repeats)
        diff = float(mx.abs(mlx_op(x, w, **kwargs) - gemm_op(x, w, **kwargs)).max())
        # What the installed op runs: undilated, ungrouped conv1d stays MLX's own (a GEMM already).
        native = name == "conv1d" and kwargs.get("dilation", 1) == 1 and kwargs.get("groups", 1) == 1
        rows.append(
            {
                "op": name,
                "input": list(x_shape),
                "weight": list(w_shape),
                "args": kwargs,
                "installed": "mlx" if native else "gemm",
                "mlx_ms": t_mlx * 1e3,
                "gemm_ms": t_gemm * 1e3,
                "speedup": t_mlx / t_gemm,
                "max_abs_diff_e6": diff * 1e6,
            }
        )  # in millionths: the results keep 3 decimals
    return rows


def _phonemes(model) -> str:
    pipeline = model._get_pipeline("a")
    _, tokens = pipeline.g2p(TEXT)
    return " ".join(ps for _, ps, _ in pipeline.en_tokenize(tokens) if ps)


def bench_synthesis(model_dir: Path, repeats: int) -> dict:
    import mlx.core as mx
    import numpy as np
    from mlx_audio.tts.utils import load_model

    from deployments.kernels import install_cpu_kernels, uninstall_cpu_kernels
    from deployments.kernels import kokoro as kokoro_kernels
    from deployments.tts.model_hooks import before_load

    before_load(model_dir)  # the G2P alias (and the kernels, taken out again for the stock run)
    model = load_model(model_dir)
    t0 = time.perf_counter()
    phonemes = _phonemes(model)
    g2p_s = time.perf_counter() - t0
    pack = mx.load(str(model_dir / "voices" / f"{VOICE}.safetensors"))["voice"]
    style = pack[len(phonemes) - 1]
    systems, audio = {}, {}

    def run_mlx(label: str) -> None:
        times = []
        for _ in range(repeats):
            mx.random.seed(0)  # the source's noise: the same in both MLX runs
            t = time.perf_counter()
            out = model(phonemes, style)
            times.append(time.perf_counter() - t)
        audio[label] = np.asarray(out).reshape(-1)
        systems[label] = _rtf(times, audio[label].size)

    uninstall_cpu_kernels()
    kokoro_kernels.uninstall()
    run_mlx("mlx_audio_stock")
    install_cpu_kernels({"gemm_conv"})
    run_mlx("mlx_audio_gemm_conv")
    uninstall_cpu_kernels()
    install_cpu_kernels({"gemm_conv", "fft_conv", "kokoro"})
    kokoro_kernels.install()
    run_mlx("mlx_audio_cpu_kernels")  # what a TTS replica runs (OMINIX_CPU_KERNELS=all)
    systems["onnxruntime_int8"] = _onnxruntime(model.vocab, phonemes, np.asarray(style), repeats)
    stock = audio["mlx_audio_stock"]
    return {
        "text": TEXT,
        "voice": VOICE,
        "phonemes": len(phonemes),
        "g2p_s": g2p_s,
        "systems": systems,
        "stock_vs_gemm_max_abs_diff": float(np.abs(stock - audio["mlx_audio_gemm_conv"]).max()),
        # relative RMS of the difference: the fused Snake and the FFT change the last bits
        "stock_vs_cpu_kernels_rel_rms_diff": float(
            np.sqrt(np.mean((stock - audio["mlx_audio_cpu_kernels"]) ** 2) / np.mean(stock**2))
        ),
    }


def _rtf(times: list[float], samples: int, rate: int = 24000) -> dict:
    seconds = sorted(times)[len(times) // 2]
    return {"synthesis_s": seconds, "audio_s": samples / rate, "rtf": seconds / (samples / rate), "runs": len(times)}


def _onnxruntime(vocab: dict, phonemes: str, style, repeats: int) -> dict:
    import numpy as np
    import onnxruntime as ort

    from deployments.tts.kokoro import read_onnx_bytes

    options = ort.SessionOptions()
    # As many threads as MLX's BLAS gets (bench/__init__.py: one unless OPENBLAS_NUM_THREADS says).
    options.intra_op_num_threads = int(os.environ.get("OPENBLAS_NUM_THREADS") or os.cpu_count() or 1)
    session = ort.InferenceSession(read_onnx_bytes(), options, providers=["CPUExecutionProvider"])
    ids = [0, *[vocab[p] for p in phonemes if p in vocab], 0]
    feeds = {
        "tokens": np.array([ids], dtype=np.int64),
        "style": style.reshape(1, -1).astype(np.float32),
        "speed": np.array([1.0], dtype=np.float32),
    }
    session.run(None, feeds)  # warm-up
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        (out,) = session.run(None, feeds)
        times.append(time.perf_counter() - t)
    return {**_rtf(times, out.size), "threads": options.intra_op_num_threads, "onnxruntime": ort.__version__}


def measure(cache_dir: Path, repeats: int, progress=print) -> dict:
    from deployments.tts.kokoro import ensure_kokoro

    model_dir = ensure_kokoro(cache_dir)
    progress("kokoro: single convolution ops")
    ops = bench_ops(max(2, repeats))
    progress("kokoro: synthesis (stock mlx-audio, GEMM convolutions, onnxruntime)")
    return {"ops": ops, "synthesis": bench_synthesis(model_dir, repeats)}


def render(result: dict) -> str:
    ops = table(
        ["op", "input", "weight", "args", "MLX ms", "GEMM ms", "speed-up", "max diff (1e-6)", "installed"],
        [
            [
                o["op"],
                "x".join(map(str, o["input"])),
                "x".join(map(str, o["weight"])),
                ",".join(f"{k}={v}" for k, v in o["args"].items()),
                o["mlx_ms"],
                o["gemm_ms"],
                o["speedup"],
                o["max_abs_diff_e6"],
                o["installed"],
            ]
            for o in result["ops"]
        ],
    )
    synth = result["synthesis"]
    rows = [[name, s["synthesis_s"], s["audio_s"], s["rtf"]] for name, s in synth["systems"].items()]
    return (
        ops
        + "\n\n"
        + table(["system", "synthesis s", "audio s", "RTF"], rows)
        + (
            f"\n\nG2P (misaki, all systems): {synth['g2p_s']:.2f} s; stock vs GEMM audio max |diff| "
            f"{synth['stock_vs_gemm_max_abs_diff']:.2g}; stock vs all CPU kernels, relative RMS of the "
            f"difference {synth.get('stock_vs_cpu_kernels_rel_rms_diff', float('nan')):.2g}"
        )
    )


def plot(result: dict, path: Path):
    return None  # two small tables say it all


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    """`python -m bench --scenarios kokoro`: no Serve needed, the models run in this process."""
    return measure(cache_dir, max(1, opts.repeats), progress)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kokoro", description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    t0, load = time.perf_counter(), list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    result = measure(opts.cache_dir, opts.repeats)
    result.update(
        command=" ".join(["python -m bench.kokoro", *(argv or sys.argv[1:])]),
        duration_s=time.perf_counter() - t0,
        load_average_before=load,
    )
    save_standalone(opts.out, "kokoro", result, render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
