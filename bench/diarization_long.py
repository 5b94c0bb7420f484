"""A long recording through the diarization pipeline, in its own process: time, memory and the
progress it logs. The recording is tests/conversations.py's real telephone call (two women,
30 s) repeated back to back to `--minutes` of audio, its reference turns shifted with each copy,
so the answer is known: 2 speakers, the call's turns. Reports the wall time per audio minute,
the process's peak resident memory beside what the samples alone take, the speakers found, the
DER (pyannote.metrics, 0.25 s collar) and the progress lines the pipeline logged.

    .venv/bin/python -m bench.diarization_long --minutes 120

Results: bench/results/diarization_long.json/.md (docs/api/diarization.md quotes them).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

from bench.cluster import rss_bytes
from bench.report import save_standalone, table

ROOT = Path(__file__).resolve().parents[1]


def _rss_mb() -> float:
    return (rss_bytes(os.getpid()) or float("nan")) / 2**20


def recording(minutes: float):
    """The call repeated to `minutes`: samples (float32, 16 kHz) and the shifted reference."""
    from tests.conversations import RATE, conversation

    call = conversation("sample")
    copies = max(1, round(minutes * 60 * RATE / len(call.samples)))
    span = len(call.samples) / RATE
    turns = [(s + k * span, e + k * span, who) for k in range(copies) for s, e, who in call.turns]
    return np.tile(call.samples, copies), turns


class _Progress(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[tuple[float, str]] = []
        self.t0 = time.perf_counter()

    def emit(self, record):
        if record.name.startswith(("deployments.diarization", "deployments.audio_models.silero_vad")):
            self.lines.append((time.perf_counter() - self.t0, record.getMessage()))


def measure(minutes: float, progress=print) -> dict:
    from deployments import blas

    blas.select()
    from deployments.diarization.config import DiarizationConfig
    from deployments.diarization.pipeline import Diarizer
    from tests.conversations import RATE, der

    diarizer = Diarizer()
    diarizer.diarize(recording(0.1)[0][: 2 * RATE])  # the models loaded and warm
    samples, turns = recording(minutes)
    rss_before = _rss_mb()
    logs = _Progress()
    root = logging.getLogger("deployments")
    root.addHandler(logs)
    root.setLevel(logging.INFO)
    progress(f"diarization_long: {len(samples) / RATE / 60:.0f} min of audio, {rss_before:.0f} MB resident")
    t0 = time.perf_counter()
    result = diarizer.diarize(samples, RATE, DiarizationConfig())
    wall = time.perf_counter() - t0
    root.removeHandler(logs)
    audio_s = len(samples) / RATE
    scored = der(turns, [(t.start, t.end, t.speaker) for t in result.turns], duration=audio_s)
    return {
        "audio_min": audio_s / 60,
        "wall_s": wall,
        "s_per_audio_min": wall / (audio_s / 60),
        "samples_mb": samples.nbytes / 2**20,
        "rss_before_mb": rss_before,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "speakers": 2,
        "found": result.speakers,
        "der": scored.der,
        "missed": scored.missed / scored.total,
        "false_alarm": scored.false_alarm / scored.total,
        "confusion": scored.confusion / scored.total,
        "progress_lines": [f"{t:.0f} s: {m}" for t, m in logs.lines],
    }


def render(r: dict) -> str:
    rows = [
        [
            f"{r['audio_min']:.0f} min",
            round(r["wall_s"]),
            r["s_per_audio_min"],
            round(r["samples_mb"]),
            round(r["rss_before_mb"]),
            round(r["peak_rss_mb"]),
            f"{r['found']} of {r['speakers']}",
            r["der"],
        ]
    ]
    head = [
        "audio",
        "wall s",
        "s per audio min",
        "samples MB",
        "resident before MB",
        "peak resident MB",
        "speakers",
        "DER",
    ]
    logged = "\n".join(f"- {line}" for line in r["progress_lines"]) or "- (none)"
    return (
        "The real telephone call (tests/conversations.py) repeated to the length, one process, "
        "the shipped settings:\n\n" + table(head, rows) + f"\n\nWhat the pipeline logged:\n\n{logged}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.diarization_long", description=__doc__)
    p.add_argument("--minutes", type=float, default=120)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    opts = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    t0 = time.perf_counter()
    result = measure(opts.minutes)
    result.update(
        command=f"python -m bench.diarization_long --minutes {opts.minutes:g}", duration_s=time.perf_counter() - t0
    )
    save_standalone(opts.out, "diarization_long", result, render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
