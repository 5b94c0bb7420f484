"""Diarization quality on dialogues spoken by Kokoro-82M voices (tests/dialogues.py: 2-4 voices,
turns of 2-8 s, gaps of 0.3-1.5 s): DER (missed + false alarm + confusion over total speech,
pyannote's definition, no collar) and speaker-count accuracy per gap size, at the shipped
threshold, and a sweep of the threshold on the same embeddings (how the default was chosen).
Also the compute time per second of audio.

`python -m bench.diarization` (or `python -m bench --scenarios diarization`), in one process;
the first run synthesizes the utterances (cached). Results: bench/results/diarization.json/.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.report import save_standalone, table

ROOT = Path(__file__).resolve().parents[1]
SWEEP = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)


def _per_gap(scores) -> list[dict]:
    rows = []
    for gap in sorted({s.dialogue.gap_s for s in scores}):
        group = [s for s in scores if s.dialogue.gap_s == gap]
        rows.append(
            {
                "gap_s": gap,
                "dialogues": len(group),
                "der_mean": float(np.mean([s.der.der for s in group])),
                "der_max": float(max(s.der.der for s in group)),
                "missed": float(sum(s.der.missed for s in group) / sum(s.der.total for s in group)),
                "false_alarm": float(sum(s.der.false_alarm for s in group) / sum(s.der.total for s in group)),
                "confusion": float(sum(s.der.confusion for s in group) / sum(s.der.total for s in group)),
                "count_accuracy": sum(s.count_right for s in group) / len(group),
                "found_vs_true": [[s.found, len(s.dialogue.speakers)] for s in group],
            }
        )
    return rows


def measure(progress=print) -> dict:
    from deployments import blas

    blas.select()
    from deployments.diarization.config import DiarizationConfig
    from deployments.diarization.pipeline import Diarizer, cluster
    from deployments.diarization.spans import Diarization, turns
    from tests.dialogues import RATE, dialogue_set, score

    progress("diarization: dialogues (Kokoro, cached after the first run)")
    dialogues = dialogue_set()
    diarizer, config = Diarizer(), DiarizationConfig()
    diarizer.diarize(dialogues[0].samples[: 2 * RATE])  # warm-up
    progress("diarization: each dialogue at the default threshold")
    t0 = time.perf_counter()
    shipped = [score(d, diarizer.diarize(d.samples, RATE, config)) for d in dialogues]
    compute_s = time.perf_counter() - t0
    audio_s = sum(len(d.samples) for d in dialogues) / RATE
    progress("diarization: threshold sweep")
    embedded = [
        (d, p, diarizer.embed_pieces(d.samples, p)) for d in dialogues for p in [diarizer.pieces(d.samples, config)]
    ]
    sweep = []
    for threshold in SWEEP:
        c = DiarizationConfig(threshold=threshold)
        scores = []
        for d, pieces, x in embedded:
            labels = cluster(x, [p.duration for p in pieces], c)
            result = Diarization(turns(pieces, labels, c.join_gap_s), [str(k) for k in set(labels)], 0.0)
            scores.append(score(d, result))
        sweep.append({"threshold": threshold, "per_gap": _per_gap(scores)})
    return {
        "threshold": config.threshold,
        "per_gap": _per_gap(shipped),
        "sweep": sweep,
        "audio_s": audio_s,
        "compute_s_per_audio_s": compute_s / audio_s,
        "dialogues": [s.dialogue.name for s in shipped],
    }


def render(result: dict) -> str:
    main = table(
        ["gap s", "dialogues", "DER mean", "DER max", "missed", "false alarm", "confusion", "count right"],
        [
            [
                r["gap_s"],
                r["dialogues"],
                r["der_mean"],
                r["der_max"],
                r["missed"],
                r["false_alarm"],
                r["confusion"],
                f"{round(r['count_accuracy'] * r['dialogues'])}/{r['dialogues']}",
            ]
            for r in result["per_gap"]
        ],
    )
    gaps = [r["gap_s"] for r in result["per_gap"]]
    sweep = table(
        ["threshold", *[f"gap {g:g} s: DER / count" for g in gaps]],
        [
            [
                s["threshold"],
                *[
                    f"{r['der_mean']:.3f} / {round(r['count_accuracy'] * r['dialogues'])}/{r['dialogues']}"
                    for r in s["per_gap"]
                ],
            ]
            for s in result["sweep"]
        ],
    )
    return (
        f"Threshold {result['threshold']} (the default), {len(result['dialogues'])} dialogues, "
        f"{result['audio_s']:.0f} s of audio, {result['compute_s_per_audio_s']:.3f} s of compute per "
        f"second of audio.\n\n{main}\n\nThreshold sweep (same embeddings):\n\n{sweep}"
    )


def plot(result: dict, path: Path):
    return None  # two tables say it all


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    """`python -m bench --scenarios diarization`: no Serve needed, the models run in this process."""
    return measure(progress)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.diarization", description=__doc__)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    opts = p.parse_args(argv)
    t0 = time.perf_counter()
    result = measure()
    result.update(command="python -m bench.diarization", duration_s=time.perf_counter() - t0)
    save_standalone(opts.out, "diarization", result, render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
