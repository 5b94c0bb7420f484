"""Which VAD should cut long files into Whisper windows: the energy VAD or Silero.

The 5-minute recording of tests/e2e/test_asr_api.py (eight espeak-ng sentences in turn, pauses
of 0.6-1.6 s), clean and with background noise (white noise at 10 dB SNR, and a steady hum plus
noise at 5 dB), transcribed in process by the ASR engine with Whisper tiny.en at temperature 0,
once per VAD (`asr.vad`). Reports the word error rate against what was said, the windows, the
speech kept, and the time. No Serve: `python -m bench --scenarios vad`.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench.report import table

RATE = 16000
VADS = ("energy", "silero")


def recording(seconds: float) -> tuple[np.ndarray, str]:
    from tests.speech import long_recording

    audio, spans = long_recording(seconds)
    return audio.astype(np.float32), " ".join(text for text, _, _ in spans)


def noisy(audio: np.ndarray, snr_db: float, hum: bool, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    speech_power = float(np.mean(audio[np.abs(audio) > 1e-4] ** 2))
    noise = rng.standard_normal(len(audio)).astype(np.float32)
    if hum:  # a mains hum and its harmonics under the hiss
        t = np.arange(len(audio)) / RATE
        noise = noise * 0.5 + sum(np.sin(2 * np.pi * f * t) for f in (50, 100, 150)).astype(np.float32)
    noise *= np.sqrt(speech_power / 10 ** (snr_db / 10) / np.mean(noise**2))
    return np.clip(audio + noise, -1, 1).astype(np.float32)


async def transcribe(audio: np.ndarray, vad: str, model_dir: Path) -> dict:
    from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions

    engine = await ASREngine.start("whisper-tiny.en", model_dir, EngineConfig(vad=vad))
    try:
        windows = len(engine._split(audio))
        started = time.perf_counter()
        (transcript,) = await engine.transcribe([audio], TranscribeOptions())
        return {"text": transcript.text, "windows": windows, "seconds": time.perf_counter() - started}
    finally:
        engine.shutdown()


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en
    from tests.speech import word_error_rate

    model_dir = ensure_whisper_tiny_en(cache_dir)
    clean, said = recording(60.0 if opts.smoke else 300.0)
    conditions = {
        "clean": clean,
        "white noise 10 dB": noisy(clean, 10, False),
        "hum + noise 5 dB": noisy(clean, 5, True),
    }
    results = {}
    for name, audio in conditions.items():
        for vad in VADS:
            r = await transcribe(audio, vad, model_dir)
            r["wer"] = word_error_rate(said, r["text"])
            results[f"{name} / {vad}"] = r
            progress(f"vad: {name}, {vad}: WER {r['wer']:.3f}, {r['windows']} windows, {r['seconds']:.1f} s")
    return {"audio_s": len(clean) / RATE, "results": results}


def render(result: dict) -> str:
    rows = [[name, f"{r['wer']:.3f}", r["windows"], f"{r['seconds']:.1f}"] for name, r in result["results"].items()]
    return table(["recording / VAD", "WER", "windows", "transcription s"], rows) + (
        f"\n\n{result['audio_s']:.0f} s of audio, Whisper tiny.en, temperature 0."
    )


def plot(result: dict, path: Path):
    return None  # one table says it all
