"""Diarization quality and cost, in one process (no Serve): the real conversations of
tests/conversations.py (a telephone call and AMI meeting excerpts, DER by pyannote.metrics with
a 0.25 s collar) and the dialogues spoken by Kokoro-82M voices (tests/dialogues.py: 2-4 voices,
turns of 2-8 s, gaps of 0.3-1.5 s; DER without collar, speaker-count accuracy per gap size), at
the shipped settings, then a sweep of the clustering threshold on the same embeddings (how the
default was chosen). Compute time per minute of audio beside the DER.

No peer runs here: pyannote's pipelines and sherpa-onnx's diarization need model weights from
the Hugging Face hub or GitHub releases, which this machine cannot reach (docs/api/diarization.md).

`python -m bench.diarization` (or `python -m bench --scenarios diarization`); the first run
synthesizes the Kokoro utterances (cached). Results: bench/results/diarization.json/.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bench.report import save_standalone, table

ROOT = Path(__file__).resolve().parents[1]
SWEEP = (0.22, 0.25, 0.28, 0.31, 0.34)


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
    from deployments.diarization.pipeline import Diarizer
    from tests.conversations import conversations
    from tests.dialogues import RATE, dialogue_set

    diarizer, config = Diarizer(), DiarizationConfig()
    progress("diarization: real conversations (tests/fixtures/conversations)")
    talks = conversations()
    diarizer.diarize(talks[0].samples[: 2 * RATE])  # warm-up
    real = [_real_row(c, diarizer, config) for c in talks]
    progress("diarization: the meetings through a telephone band (8 kHz and back)")
    phone = [_real_row(c, diarizer, config, telephone=True) for c in talks if c.kind != "telephone"]
    progress("diarization: Kokoro dialogues (cached after the first run)")
    dialogues = dialogue_set()
    t0 = time.perf_counter()
    shipped = [_kokoro_score(d, diarizer.diarize(d.samples, RATE, config)) for d in dialogues]
    compute_s = time.perf_counter() - t0
    audio_s = sum(len(d.samples) for d in dialogues) / RATE
    progress("diarization: threshold sweep (same embeddings)")
    return {
        "threshold": config.threshold,
        "window_s": config.window_s,
        "hop_s": config.hop_s,
        "real": real,
        "telephone_band": phone,
        "real_s_per_audio_min": 60 * sum(r["compute_s"] for r in real) / sum(r["audio_s"] for r in real),
        "per_gap": _per_gap(shipped),
        "sweep": _sweep(diarizer, config, talks, dialogues),
        "audio_s": audio_s,
        "compute_s_per_audio_s": compute_s / audio_s,
        "dialogues": [s.dialogue.name for s in shipped],
    }


def _real_row(c, diarizer, config, telephone: bool = False) -> dict:
    """One recording diarized and scored; `telephone`: band-limited first (resampled to 8 kHz
    and back, what a phone line keeps)."""
    from deployments.audio.resample import resample
    from tests.conversations import RATE, der

    samples = resample(resample(c.samples, RATE, 8000), 8000, RATE) if telephone else c.samples
    t0 = time.perf_counter()
    result = diarizer.diarize(samples, RATE, config)
    compute_s = time.perf_counter() - t0
    scored = der(c.turns, [(t.start, t.end, t.speaker) for t in result.turns], duration=len(c.samples) / RATE)
    return {
        "name": c.name,
        "kind": f"{c.kind}, 8 kHz band" if telephone else c.kind,
        "speakers": len(c.speakers),
        "found": result.speakers,
        "der": scored.der,
        "missed": scored.missed / scored.total,
        "false_alarm": scored.false_alarm / scored.total,
        "confusion": scored.confusion / scored.total,
        "audio_s": len(c.samples) / RATE,
        "compute_s": compute_s,
    }


def _kokoro_score(d, result):
    from tests.dialogues import score

    return score(d, result)


def _sweep(diarizer, config, talks, dialogues) -> list[dict]:
    """Each threshold on embeddings computed once: DER per real conversation, the Kokoro
    dialogues' DER and counts per gap."""
    from dataclasses import replace

    from deployments.diarization.clustering import cluster
    from deployments.diarization.spans import Diarization, voted_turns
    from tests.conversations import RATE, der

    def diarized(pieces, x, c):
        if not pieces:
            return Diarization([], [], 0.0)
        labels = cluster(x, [p.duration for p in pieces], c)
        found = voted_turns(pieces, labels, c.frame_s, c.join_gap_s)
        return Diarization(found, [str(k) for k in sorted(set(labels))], 0.0).voiced()

    real = [(t, *diarizer.voice_pieces(t.samples, config)) for t in talks]
    fake = [(d, *diarizer.voice_pieces(d.samples, config)) for d in dialogues]
    out = []
    for threshold in SWEEP:
        c = replace(config, threshold=threshold, known_max_distance=threshold)
        per_file = {}
        for t, pieces, x in real:
            result = diarized(pieces, x, c)
            hyp = [(u.start, u.end, u.speaker) for u in result.turns]
            per_file[t.name] = [der(t.turns, hyp, duration=len(t.samples) / RATE).der, result.speakers]
        scores = [_kokoro_score(d, diarized(pieces, x, c)) for d, pieces, x in fake]
        out.append({"threshold": threshold, "real": per_file, "per_gap": _per_gap(scores)})
    return out


def render(result: dict) -> str:
    real = table(
        ["recording", "audio", "speakers", "found", "DER", "missed", "false alarm", "confusion", "s per audio min"],
        [
            [
                r["name"],
                r["kind"],
                r["speakers"],
                r["found"],
                r["der"],
                r["missed"],
                r["false_alarm"],
                r["confusion"],
                60 * r["compute_s"] / r["audio_s"],
            ]
            for r in result["real"] + result.get("telephone_band", [])
        ],
    )
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
    names = [r["name"] for r in result["real"]]
    sweep = table(
        ["threshold", *[f"{n}: DER / found" for n in names], "Kokoro: DER mean / counts right"],
        [
            [
                s["threshold"],
                *[f"{s['real'][n][0]:.3f} / {s['real'][n][1]}" for n in names],
                _kokoro_summary(s["per_gap"]),
            ]
            for s in result["sweep"]
        ],
    )
    return (
        f"Threshold {result['threshold']}, windows of {result['window_s']} s every {result['hop_s']} s (the "
        f"defaults).\n\nReal conversations (DER by pyannote.metrics, collar 0.25 s), "
        f"{result['real_s_per_audio_min']:.1f} s of compute per minute of audio:\n\n{real}\n\n"
        f"Kokoro dialogues ({len(result['dialogues'])}, {result['audio_s']:.0f} s of audio, "
        f"{60 * result['compute_s_per_audio_s']:.1f} s of compute per minute of audio; DER without collar):\n\n"
        f"{main}\n\nThreshold sweep (same embeddings):\n\n{sweep}"
    )


def _kokoro_summary(per_gap: list[dict]) -> str:
    n = sum(r["dialogues"] for r in per_gap)
    der = sum(r["der_mean"] * r["dialogues"] for r in per_gap) / n
    right = sum(round(r["count_accuracy"] * r["dialogues"]) for r in per_gap)
    return f"{der:.3f} / {right}/{n}"


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
