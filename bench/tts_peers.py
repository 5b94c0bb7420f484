"""TTS against mlx-audio's own server, side by side: `python -m bench --scenarios tts_peers`.

The same Kokoro-82M directory (the shipped `ominix-kokoro-82m`, converted into the model cache)
served by this graph's `/v1/audio/speech` (one TTS replica, as shipped: the CPU kernels) and by
`python -m mlx_audio.server` (bench/mlx_audio_cpu.py: mlx-audio's server with the one fix it
needs to run without a GPU backend), the same text, voice and streamed 16-bit PCM, at 1 and 4
simultaneous requests; the systems alternate which goes first. Per request: time to first audio
(the first body byte) and RTF (request time / its audio's duration); per wave: wall time /
total audio. Every request must return the same length of audio within a system.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import percentile, ratio
from bench.tts import speak

TEXT = "Please schedule the meeting for Tuesday."
VOICE = "af_heart"
BYTES_PER_SECOND = 24000 * 2  # 24 kHz, 16-bit mono PCM from both systems
SYSTEMS = ("graph", "mlx_audio_server")


async def wave(http: httpx.AsyncClient, url: str, body: dict, n: int) -> dict:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(speak(http, url, body) for _ in range(n)))
    wall = time.perf_counter() - t0
    audio_s = [r["bytes"] / BYTES_PER_SECOND for r in results]
    ttfa = [r["ttfa"] * 1000 for r in results]
    rtf = [r["total"] / a for r, a in zip(results, audio_s) if a > 0]
    return {
        "ttfa_p50_ms": percentile(ttfa, 50),
        "ttfa_max_ms": max(ttfa),
        "rtf_p50": percentile(rtf, 50) if rtf else None,
        "wave_rtf": wall / sum(audio_s) if sum(audio_s) else None,
        "wall_s": wall,
        "audio_s": audio_s,
    }


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from bench.peers import mlx_audio_server
    from deployments.tts.kokoro import KOKORO_TTS_ID, ensure_kokoro

    model_dir = ensure_kokoro(cache_dir)
    levels = [1] if opts.smoke else [1, 4]
    text = "Hello there." if opts.smoke else TEXT
    bodies = {
        "graph": {"model": KOKORO_TTS_ID, "input": text, "voice": VOICE, "response_format": "pcm"},
        "mlx_audio_server": {
            "model": str(model_dir),
            "input": text,
            "voice": VOICE,
            "lang_code": "a",
            "response_format": "pcm",
            "stream": True,
        },
    }
    app = "bench-tts-peers"
    urls = {"graph": cluster.deploy(app, {"tts": {"enabled": True, "default_model": KOKORO_TTS_ID}})}
    peer = mlx_audio_server(work / "mlx_audio_tts_server.log", cache_dir)
    urls["mlx_audio_server"] = peer.url
    results: dict = {s: {} for s in SYSTEMS}
    try:
        await wait_ready(urls["graph"])
        await peer.wait_ready()
        async with httpx.AsyncClient(timeout=1800, limits=httpx.Limits(max_connections=16)) as http:
            for system in SYSTEMS:  # warm-up: the peer loads the model on its first request
                first = await speak(http, urls[system], bodies[system])
                progress(f"tts_peers: {system} warm ({first['total']:.1f} s, {first['bytes']} bytes)")
            for i, n in enumerate(levels):
                for system in SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]:
                    results[system][str(n)] = m = await wave(http, urls[system], bodies[system], n)
                    progress(
                        f"tts_peers: {system}, {n} at once: first audio p50 {m['ttfa_p50_ms']:.0f} ms, "
                        f"RTF p50 {m['rtf_p50']:.2f}, wave {m['wall_s']:.1f} s"
                    )
    finally:
        peer.stop()
        cluster.delete(app)
    lengths = {s: {round(a, 3) for m in results[s].values() for a in m["audio_s"]} for s in SYSTEMS}
    return {
        "model_dir": model_dir.name,
        "text": text,
        "voice": VOICE,
        "levels": levels,
        "results": results,
        "audio_lengths_s": {s: sorted(v) for s, v in lengths.items()},
        "failed": any(len(v) != 1 for v in lengths.values()),
        "rtf_peer_over_graph": {
            str(n): ratio(results["mlx_audio_server"][str(n)]["rtf_p50"], results["graph"][str(n)]["rtf_p50"])
            for n in levels
        },
    }


def render(result: dict) -> str:
    rows = [
        [n, system, m["ttfa_p50_ms"], m["ttfa_max_ms"], m["rtf_p50"], m["wave_rtf"], m["audio_s"][0]]
        for n in map(str, result["levels"])
        for system in SYSTEMS
        if (m := result["results"][system].get(n))
    ]
    out = table(
        ["requests at once", "system", "first audio p50 ms", "first audio max ms", "RTF p50", "wave RTF", "audio s"],
        rows,
    )
    ratios = ", ".join(f"{n} at once: {r:.3g}x" for n, r in result["rtf_peer_over_graph"].items() if r is not None)
    return f"{out}\n\nRTF, mlx_audio.server / this graph: {ratios}. Text: {result['text']!r}, voice {result['voice']}."


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.8))
    series = {f"{system} x{n}": m for system in SYSTEMS for n, m in result["results"][system].items() if m is not None}
    percentile_bars(ax, series, "ttfa_p50_ms", "ttfa_max_ms", "time to first audio (ms): p50 and max")
    fig.suptitle(f"Kokoro-82M: this graph vs mlx_audio.server ({result['model_dir']})")
    return saved(plt, fig, path, dpi=90)
