"""Streaming ASR sessions (MiniInfer's /v1/audio/stream/sessions): 1, 4 and 8 live sessions at
once, each streaming the same espeak-ng speech (two sentences and a pause) in 0.5 s chunks,
paced at real time, on the shipped ASR settings and the default Whisper tiny.en.

Reports the chunk round trip p50/p95 (a chunk's POST to its answer; a chunk that decodes a
partial or a final costs a Whisper pass), end of speech -> final (from the chunk that
completes the 0.7 s pause, i.e. the earliest the server can know, to the answer carrying the
finalised utterance), and the finish request's latency. Every session must finalise the same
text: the scenario fails otherwise. mlx-audio's own realtime server is not run side by side
(not measured yet: docs/api/streaming-asr.md#not-yet).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import httpx
import numpy as np

from bench.cluster import BenchCluster, wait_ready
from bench.report import percentile_bars, pyplot, table
from bench.stats import percentile

SESSIONS = (1, 4, 8)
CHUNK_S = 0.5
RATE = 16000
TEXTS = ("Please send the quarterly report to the finance team.", "Thank you very much.")
ROUTE = "/v1/audio/stream/sessions"


def speech_pcm() -> bytes:
    from tests.speech import silence, speak

    audio = np.concatenate([silence(0.3), speak(TEXTS[0]), silence(1.0), speak(TEXTS[1]), silence(1.0)])
    return np.clip(np.round(audio * 32768), -32768, 32767).astype("<i2").tobytes()


async def session(http: httpx.AsyncClient, url: str, pcm: bytes) -> dict:
    sid = (await http.post(f"{url}{ROUTE}")).raise_for_status().json()["sid"]
    step = int(CHUNK_S * RATE) * 2
    rtts, finals, seen = [], [], 0
    t0 = time.perf_counter()
    for n, i in enumerate(range(0, len(pcm), step)):
        await asyncio.sleep(max(0.0, t0 + n * CHUNK_S - time.perf_counter()))  # real-time pacing
        sent = time.perf_counter()
        r = await http.post(f"{url}{ROUTE}/{sid}", content=pcm[i : i + step])
        r.raise_for_status()
        rtts.append(time.perf_counter() - sent)
        answer = r.json()
        if len(answer["segments"]) > seen:
            seen = len(answer["segments"])
            # the pause was complete at (utterance end) in stream time; the chunk carrying it
            # was sent at t0 + its index * CHUNK_S at the earliest
            pause_done = t0 + (answer["segments"][-1]["end"] // CHUNK_S) * CHUNK_S
            finals.append(time.perf_counter() - max(pause_done, t0))
    sent = time.perf_counter()
    final = (await http.post(f"{url}{ROUTE}/{sid}", params={"finish": 1})).raise_for_status().json()
    return {"rtts": rtts, "finals": finals, "finish": time.perf_counter() - sent, "text": final["text"]}


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.asr.config import ASRSlotConfig

    model = ASRSlotConfig().default_model
    counts = (1, 2) if opts.smoke else SESSIONS
    pcm = speech_pcm()
    url = cluster.deploy("bench-asr-stream", {"asr": {"enabled": True, "default_model": model}})
    results, texts = {}, set()
    try:
        await wait_ready(url)
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
            await session(http, url, pcm)  # warm-up
            for n in counts:
                runs = await asyncio.gather(*(session(http, url, pcm) for _ in range(n)))
                rtts = [x for r in runs for x in r["rtts"]]
                finals = [x for r in runs for x in r["finals"]]
                texts |= {r["text"] for r in runs}
                results[str(n)] = {
                    "chunk_rtt_p50_ms": percentile(rtts, 50) * 1000,
                    "chunk_rtt_p95_ms": percentile(rtts, 95) * 1000,
                    "speech_end_to_final_p50_ms": percentile(finals, 50) * 1000,
                    "speech_end_to_final_p95_ms": percentile(finals, 95) * 1000,
                    "finish_p50_ms": percentile([r["finish"] for r in runs], 50) * 1000,
                    "chunks": len(rtts),
                }
                progress(f"asr_stream: {n} sessions: chunk RTT p50 {results[str(n)]['chunk_rtt_p50_ms']:.0f} ms")
    finally:
        cluster.delete("bench-asr-stream")
    return {
        "model": model,
        "audio_s": len(pcm) / 2 / RATE,
        "chunk_s": CHUNK_S,
        "results": results,
        "texts": sorted(texts),
        "failed": len(texts) != 1,
    }


def render(result: dict) -> str:
    rows = [
        [n, m["chunk_rtt_p50_ms"], m["chunk_rtt_p95_ms"], m["speech_end_to_final_p50_ms"],
         m["speech_end_to_final_p95_ms"], m["finish_p50_ms"]]
        for n, m in result["results"].items()
    ]  # fmt: skip
    out = table(
        ["sessions", "chunk RTT p50 ms", "p95 ms", "speech end -> final p50 ms", "p95 ms", "finish p50 ms"], rows
    )
    return f"{out}\n\nFinal texts identical across sessions: {not result['failed']} ({result['texts']})"


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    percentile_bars(a, result["results"], "chunk_rtt_p50_ms", "chunk_rtt_p95_ms", "chunk round trip (ms)")
    percentile_bars(
        b, result["results"], "speech_end_to_final_p50_ms", "speech_end_to_final_p95_ms", "speech end -> final (ms)"
    )
    fig.suptitle(f"Streaming ASR sessions, {result['model']}, {result['chunk_s']} s chunks, by live sessions")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
