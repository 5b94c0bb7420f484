"""Scenario 3, TTS bursts: 16 speech requests at once (POST /v1/audio/speech, streamed PCM)
against the TTS slot autoscaling (1 to `max_replicas` replicas, Serve's autoscaler with short
delays) and against a fixed single replica, both apps on the same Serve.

Reports time to first audio p50/p95 and the burst's total time (medians over bursts), and
the running replica count over time read from Serve's status, which is plotted. Every
request's audio must be the same length (the model is greedy and deterministic).
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

TEXT = (
    "The quick brown fox jumps over the lazy dog. A small model speaks this sentence for the benchmark. "
    "Then it reads one more line, slowly and clearly."
)


def scaling(max_replicas: int) -> dict:
    # The ingress's handle reports load every metrics_interval_s (default 10 s: little reaction
    # within a burst). Ray 2.60 calls the field deprecated for RAY_SERVE_*_METRIC_PUSH_INTERVAL_S
    # env vars, which it does not read yet (docs/resources.md).
    return {
        "min_replicas": 1,
        "max_replicas": max_replicas,
        "target_ongoing_requests": 1,
        "upscale_delay_s": 1,
        "downscale_delay_s": 5,
        "look_back_period_s": 2,
        "metrics_interval_s": 0.5,
    }


def running_replicas(app: str) -> int:
    from ray import serve

    status = serve.status().applications[app].deployments["TTS"]
    return int(status.replica_states.get("RUNNING", 0))


async def speak(http: httpx.AsyncClient, url: str, body: dict) -> dict:
    start, first, size = time.perf_counter(), None, 0
    async with http.stream("POST", f"{url}/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for chunk in r.aiter_raw():
            if chunk and first is None:
                first = time.perf_counter()
            size += len(chunk)
    return {"ttfa": first - start, "total": time.perf_counter() - start, "bytes": size}


async def burst(http, app: str, url: str, n: int, body: dict) -> tuple[dict, list, set]:
    timeline: list = []
    t0 = time.perf_counter()
    tasks = [asyncio.create_task(speak(http, url, body)) for _ in range(n)]
    while not all(t.done() for t in tasks):
        timeline.append((time.perf_counter() - t0, running_replicas(app)))
        await asyncio.sleep(0.25)
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    timeline.append((wall, running_replicas(app)))
    ttfa = [r["ttfa"] * 1000 for r in results]
    metrics = {
        "ttfa_p50_ms": percentile(ttfa, 50),
        "ttfa_p95_ms": percentile(ttfa, 95),
        "total_s": wall,
        "peak_replicas": max(c for _, c in timeline),
    }
    return metrics, timeline, {r["bytes"] for r in results}


async def back_to_one(app: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while running_replicas(app) > 1 and time.monotonic() < deadline:
        await asyncio.sleep(1)


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.tts.config import TTSSlotConfig

    model = TTSSlotConfig().default_model
    n = 4 if opts.smoke else 16
    max_replicas = 2 if opts.smoke else 4
    variants = {  # the deployment's own resource asks (docs/resources.md)
        "autoscaling": {"autoscaling_config": scaling(max_replicas)},
        "single_replica": {"num_replicas": 1},
    }
    # Long enough that a burst outlasts the autoscaler's reaction time (a few seconds).
    body = {"input": TEXT if opts.smoke else " ".join([TEXT] * 10), "response_format": "pcm"}
    urls, runs, timelines, sizes = {}, {v: [] for v in variants}, {v: [] for v in variants}, set()
    try:
        for name, options in variants.items():
            app = f"bench-tts-{name.replace('_', '-')}"
            urls[name] = cluster.deploy(app, {"tts": {"enabled": True}}, {"TTS": options})
            await wait_ready(urls[name])
            progress(f"tts: {name} is up")
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
            for url in urls.values():  # warm-up
                sizes |= {(await speak(http, url, body))["bytes"]}
            for rep in range(opts.asr_rounds):
                for name in list(variants) if rep % 2 == 0 else list(variants)[::-1]:
                    app = f"bench-tts-{name.replace('_', '-')}"
                    await back_to_one(app)
                    metrics, timeline, burst_sizes = await burst(http, app, urls[name], n, body)
                    sizes |= burst_sizes
                    runs[name].append(metrics)
                    timelines[name].append(timeline)
                    progress(
                        f"tts: burst {rep + 1}/{opts.asr_rounds} {name}: {metrics['total_s']:.1f} s, "
                        f"first audio p50 {metrics['ttfa_p50_ms']:.0f} ms, peak {metrics['peak_replicas']} replicas"
                    )
    finally:
        for name in urls:
            cluster.delete(f"bench-tts-{name.replace('_', '-')}")
    results = {name: {**median_over_repeats(runs[name]), "bursts": runs[name]} for name in variants}
    return {
        "model": model,
        "burst": n,
        "max_replicas": max_replicas,
        "bursts": opts.asr_rounds,
        "text_chars": len(body["input"]),
        "results": results,
        "replica_timeline": {name: t[0] if t else [] for name, t in timelines.items()},
        "audio_bytes_per_request": sorted(sizes),
        "failed": len(sizes) != 1,  # every request must have produced the same audio
        "total_time_speedup": ratio(results["single_replica"]["total_s"], results["autoscaling"]["total_s"]),
    }


def render(result: dict) -> str:
    rows = [
        [name, m["ttfa_p50_ms"], m["ttfa_p95_ms"], m["total_s"], m["peak_replicas"]]
        for name, m in result["results"].items()
    ]
    out = table(["TTS", "first audio p50 ms", "first audio p95 ms", "burst total s", "peak replicas"], rows)
    s = result["total_time_speedup"]
    return f"{out}\n\nBurst of {result['burst']}: single-replica total time / autoscaling total time = " + (
        "-" if s is None else f"{s:.3g}"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    for name, timeline in result["replica_timeline"].items():
        if timeline:
            a.step([t for t, _ in timeline], [c for _, c in timeline], where="post", label=name)
    a.set_xlabel("seconds since the burst started")
    a.set_ylabel("running TTS replicas")
    a.set_title(f"replicas during a burst of {result['burst']} (first burst)")
    a.legend()
    percentile_bars(b, result["results"], "ttfa_p50_ms", "ttfa_p95_ms", "time to first audio (ms)")
    fig.suptitle(f"TTS burst, {result['model']} (medians of {result['bursts']} bursts)")
    return saved(plt, fig, path, dpi=90)
