"""Speed of the two speech building blocks (deployments/audio_models), seconds of compute per
second of audio, on ~60 s of espeak-ng speech with pauses:
- Silero VAD in MLX (all windows batched through the convolutions) vs onnxruntime running the
  package's own ONNX window by window, as silero-vad's OnnxWrapper does (one thread);
- the GE2E speaker encoder in MLX (resemblyzer's own torch timing is in docs/speech-models.md).

`python -m bench.speech_models [--repeats N]` writes bench/results/speech_models.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from bench.report import table, write_result
from bench.stats import median

ROOT = Path(__file__).resolve().parents[1]
RATE = 16000
TEXTS = [
    "The meeting starts at nine o'clock in the small conference room.",
    "Please bring the quarterly report and the new budget figures.",
    "We will discuss the hiring plan and the office move after lunch.",
]


def speech(seconds: float) -> np.ndarray:
    from tests.speech import silence, speak

    parts, total, i = [], 0, 0
    while total < seconds * RATE:
        parts += [speak(TEXTS[i % len(TEXTS)]), silence(0.7)]
        total += len(parts[-2]) + len(parts[-1])
        i += 1
    return np.concatenate(parts)


def seconds_per_second(fn, audio: np.ndarray, repeats: int) -> float:
    fn(audio[: 5 * RATE])  # warm-up: weights loaded, kernels ready
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(audio)
        times.append(time.perf_counter() - start)
    return median(times) / (len(audio) / RATE)


def onnxruntime_vad():
    import onnxruntime

    from deployments.audio_models import package_file
    from deployments.audio_models.silero_vad import ONNX_FILE, PACKAGE, windows

    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = opts.intra_op_num_threads = 1  # as silero-vad's OnnxWrapper
    session = onnxruntime.InferenceSession(
        str(package_file(PACKAGE, ONNX_FILE)), opts, providers=["CPUExecutionProvider"]
    )

    def run(audio):
        state = np.zeros((2, 1, 128), np.float32)
        for window in windows(audio):
            _, state = session.run(None, {"input": window[None], "state": state, "sr": np.array(RATE, np.int64)})

    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speech_models", description=__doc__)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    opts = p.parse_args(argv)

    from deployments.audio_models.silero_vad import default_vad
    from deployments.audio_models.speaker_encoder import default_encoder

    audio = speech(opts.seconds)
    vad, encoder = default_vad(), default_encoder()
    results = {
        "audio_seconds": len(audio) / RATE,
        "silero_vad_mlx": seconds_per_second(vad.probabilities, audio, opts.repeats),
        "silero_vad_onnxruntime": seconds_per_second(onnxruntime_vad(), audio, opts.repeats),
        "speaker_encoder_mlx": seconds_per_second(lambda a: encoder.embed_utterance(a, RATE), audio, opts.repeats),
    }
    path = write_result(opts.out, "speech_models", results)
    rows = [(k, results[k]) for k in ("silero_vad_mlx", "silero_vad_onnxruntime", "speaker_encoder_mlx")]
    print(table(["model", "s per s of audio"], rows))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
