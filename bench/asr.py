"""Scenario 2, ASR batching: 16 concurrent clients each send the same fixed set of utterances
(real speech from espeak-ng) to POST /v1/audio/transcriptions, once per ASR_MODE
(off, interactive, conversational, offline), each mode its own graph app on the same Serve.

Reports throughput in x real time (seconds of audio transcribed per wall-clock second) and
per-request latency p50/p95, medians over rounds (modes interleaved, order rotating). The
transcripts must be identical across modes: batching may not change what is heard, and the
scenario fails otherwise.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import median_over_repeats, percentile, ratio

MODES = ("off", "interactive", "conversational", "offline")
UTTERANCES = (  # each client sends the first `asr_utterances` (presets: 2 full, 1 quick)
    "Please send the quarterly report to the finance team before Friday.",
    "Turn left at the next traffic light and the station is on your right.",
    "The quick brown fox jumps over the lazy dog.",
)
RATE = 16000


def utterance_wavs(texts) -> list[tuple[bytes, float]]:
    """(WAV bytes, duration in s) for each text, spoken by espeak-ng."""
    from deployments.audio.encode import encode_wav
    from tests.speech import speak

    out = []
    for text in texts:
        samples = speak(text, RATE)
        out.append((encode_wav(samples, RATE), len(samples) / RATE))
    return out


async def transcribe(http: httpx.AsyncClient, url: str, wav: bytes) -> tuple[float, str]:
    start = time.perf_counter()
    r = await http.post(
        f"{url}/v1/audio/transcriptions", files={"file": ("u.wav", wav, "audio/wav")}, data={"response_format": "json"}
    )
    if r.status_code != 200:
        raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:300]}")
    return time.perf_counter() - start, r.json()["text"].strip()


async def one_round(http, url: str, clients: int, audio: list[tuple[bytes, float]], transcripts: dict) -> dict:
    latencies: list[float] = []

    async def client() -> None:
        for i, (wav, _) in enumerate(audio):
            latency, text = await transcribe(http, url, wav)
            latencies.append(latency)
            transcripts.setdefault(i, set()).add(text)

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    audio_s = clients * sum(d for _, d in audio)
    return {
        "x_real_time": audio_s / wall,
        "latency_p50_ms": percentile(latencies, 50) * 1000,
        "latency_p95_ms": percentile(latencies, 95) * 1000,
        "wall_s": wall,
    }


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.asr.config import ASRSlotConfig

    model = ASRSlotConfig().default_model
    modes = ("off", "offline") if opts.smoke else MODES
    clients = 2 if opts.smoke else 16
    audio = utterance_wavs(UTTERANCES[: opts.asr_utterances])
    urls = {}
    try:
        for mode in modes:
            args = {"enabled": True, "default_model": model, "mode": mode}
            urls[mode] = cluster.deploy(
                f"bench-asr-{mode}", {"asr": args}, {"ASR": {"ray_actor_options": {"num_cpus": 0.5}}}
            )
            await wait_ready(urls[mode])
            progress(f"asr: mode {mode} is up")
        transcripts: dict = {mode: {} for mode in modes}
        rounds: dict = {mode: [] for mode in modes}
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
            for mode in modes:  # warm-up
                await one_round(http, urls[mode], 1, audio, transcripts[mode])
            for rep in range(opts.asr_rounds):
                order = list(modes[rep % len(modes) :]) + list(modes[: rep % len(modes)])
                for mode in order:
                    m = await one_round(http, urls[mode], clients, audio, transcripts[mode])
                    rounds[mode].append(m)
                    progress(
                        f"asr: round {rep + 1}/{opts.asr_rounds} {mode}: {m['x_real_time']:.2f}x real time, "
                        f"p50 {m['latency_p50_ms']:.0f} ms"
                    )
    finally:
        for mode in urls:
            cluster.delete(f"bench-asr-{mode}")
    heard = {i: sorted(set().union(*(transcripts[m].get(i, set()) for m in modes))) for i in range(len(audio))}
    mismatched = {UTTERANCES[i]: texts for i, texts in heard.items() if len(texts) != 1}
    results = {mode: {**median_over_repeats(rounds[mode]), "rounds": rounds[mode]} for mode in modes}
    speedup = ratio(results.get("offline", {}).get("x_real_time"), results["off"]["x_real_time"])
    return {
        "model": model,
        "clients": clients,
        "utterances": [{"text": t, "seconds": d} for t, (_, d) in zip(UTTERANCES, audio)],
        "modes": list(modes),
        "rounds": opts.asr_rounds,
        "results": results,
        "transcripts": {UTTERANCES[i]: texts for i, texts in heard.items()},
        "transcripts_identical": not mismatched,
        "failed": bool(mismatched),
        "targets": {
            "offline_vs_off_throughput": {
                "value": speedup,
                "target": ">= 2.1",
                "met": None if speedup is None else speedup >= 2.1,
            }
        },
    }


def render(result: dict) -> str:
    off = result["results"]["off"]["x_real_time"]
    rows = [
        [mode, m["x_real_time"], ratio(m["x_real_time"], off), m["latency_p50_ms"], m["latency_p95_ms"]]
        for mode, m in result["results"].items()
    ]
    out = table(["ASR_MODE", "× real time", "× off", "latency p50 ms", "latency p95 ms"], rows)
    t = result["targets"]["offline_vs_off_throughput"]
    verdict = {True: "met", False: "MISSED", None: "-"}[t["met"]]
    value = "-" if t["value"] is None else f"{t['value']:.3g}"
    return (
        f"{out}\n\nTranscripts identical across modes: {result['transcripts_identical']}\n"
        f"- offline vs off throughput: {value} (target >= 2.1): {verdict}"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    modes = list(result["results"])
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.bar(modes, [result["results"][m]["x_real_time"] for m in modes], color="tab:blue")
    a.set_title(f"throughput (× real time), {result['clients']} clients")
    percentile_bars(b, result["results"], "latency_p50_ms", "latency_p95_ms", "request latency (ms)")
    fig.suptitle(f"ASR batching modes, {result['model']} (medians of {result['rounds']} rounds)")
    return saved(plt, fig, path, dpi=90)
