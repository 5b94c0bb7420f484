"""Scenario `burst`: a sustained speech burst on the shipped config's TTS slot, autoscaling (as
shipped: serve_config.yaml's autoscaling_config, resources and delays) against the same slot
held at one replica. `clients` clients send back to back for `seconds`; every request streams
PCM (POST /v1/audio/speech) of one short sentence in the slot's shipped default model (Kokoro-82M:
what a user's burst runs; a synthesis takes a core for about as long as the speech lasts), or
in the built-in tiny model for `--smoke` (seconds, no measure).

Reports, per 5 s of the burst: completed requests per second, time to first audio (p50/p95 of
the requests that started then) and the running replica count; and over the burst, the
completion rate of the last 20 s over the first 20 s. Only the TTS slot is deployed (the
others are idle replicas in a user's graph, and independent deployments); the shipped Ingress
options are kept, since its handle is what reports load to Serve's autoscaler.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import pyplot, saved, table
from bench.shipped import running, shipped_app
from bench.stats import percentile, ratio
from deployments.tts.tiny_model import TINY_TTS_ID

TEXT = "Hello there, how are you?"  # the e2e burst's sentence (tests/e2e/test_tts_burst.py)
BUCKET_S = 5.0
WINDOW_S = 20.0
VARIANTS = ("autoscaling", "one_replica")


def variant_options(name: str) -> dict:
    """The shipped deployments block; for `one_replica`, TTS fixed at one replica."""
    options = dict(shipped_app()[1])
    if name == "one_replica":
        tts = {k: v for k, v in options["TTS"].items() if k != "autoscaling_config"}
        options["TTS"] = {**tts, "num_replicas": 1}
    return options


async def client(http: httpx.AsyncClient, url: str, model: str, t0: float, stop_at: float, records: list) -> None:
    body = {"model": model, "input": TEXT, "response_format": "pcm"}
    while time.monotonic() < stop_at:
        start, first, size = time.monotonic(), None, 0
        async with http.stream("POST", f"{url}/v1/audio/speech", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
            async for chunk in r.aiter_raw():
                if chunk and first is None:
                    first = time.monotonic()
                size += len(chunk)
        records.append({"start": start - t0, "ttfa": first - start, "end": time.monotonic() - t0, "bytes": size})


async def warm_up(url: str, model: str) -> None:
    """One synthesis before the burst: the first also builds Kokoro's G2P pipeline and compiles
    the CPU kernels, seconds that belong to no burst (a running server's replica is warm)."""
    async with httpx.AsyncClient(timeout=600) as http:
        r = await http.post(f"{url}/v1/audio/speech", json={"model": model, "input": TEXT, "response_format": "pcm"})
        r.raise_for_status()


async def watch(app: str, t0: float, stop: asyncio.Event, timeline: list) -> None:
    while not stop.is_set():
        timeline.append((time.monotonic() - t0, running(app, "TTS")))
        await asyncio.sleep(0.5)


async def sustained(url: str, app: str, model: str, clients: int, seconds: float) -> tuple[list, list]:
    records, timeline, stop = [], [], asyncio.Event()
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        t0 = time.monotonic()
        watcher = asyncio.create_task(watch(app, t0, stop, timeline))
        try:
            await asyncio.gather(*(client(http, url, model, t0, t0 + seconds, records) for _ in range(clients)))
        finally:
            stop.set()
            await watcher
    return records, timeline


def summarize(records: list, timeline: list, seconds: float) -> dict:
    buckets = []
    for i in range(int(seconds // BUCKET_S)):
        lo, hi = i * BUCKET_S, (i + 1) * BUCKET_S
        ttfa = [r["ttfa"] * 1000 for r in records if lo <= r["start"] < hi]
        buckets.append(
            {
                "t_s": lo,
                "completed_per_s": sum(lo <= r["end"] < hi for r in records) / BUCKET_S,
                "ttfa_p50_ms": percentile(ttfa, 50),
                "ttfa_p95_ms": percentile(ttfa, 95),
                "replicas": max((c for t, c in timeline if lo <= t < hi), default=None),
            }
        )
    first = sum(r["end"] < WINDOW_S for r in records)
    last = sum(seconds - WINDOW_S <= r["end"] < seconds for r in records)
    ttfa = [r["ttfa"] * 1000 for r in records]
    return {
        "requests": len(records),
        "completed_per_s": sum(r["end"] < seconds for r in records) / seconds,
        "first_window_completed": first,
        "last_window_completed": last,
        "last_over_first": ratio(last, first),
        "ttfa_p50_ms": percentile(ttfa, 50),
        "ttfa_p95_ms": percentile(ttfa, 95),
        "peak_replicas": max(c for _, c in timeline),
        "buckets": buckets,
        "audio_bytes": sorted({r["bytes"] for r in records}),
    }


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    clients, seconds = (4, 2 * BUCKET_S) if opts.smoke else (16, 60.0)  # smoke: two buckets, no measure
    model = TINY_TTS_ID if opts.smoke else shipped_app()[0]["tts"]["default_model"]
    args = {"tts": {**shipped_app()[0]["tts"], "models": [TINY_TTS_ID]}, "security": shipped_app()[0]["security"]}
    results = {}
    for name in VARIANTS:  # one after the other: each has the machine to itself
        app = f"bench-burst-{name.replace('_', '-')}"
        url = cluster.deploy(app, args, variant_options(name))
        try:
            await wait_ready(url)
            await warm_up(url, model)
            progress(f"burst: {name}: {clients} clients for {seconds:.0f} s")
            records, timeline = await sustained(url, app, model, clients, seconds)
        finally:
            cluster.delete(app)
        results[name] = summarize(records, timeline, seconds)
        r = results[name]
        progress(
            f"burst: {name}: {r['requests']} requests, {r['completed_per_s']:.1f}/s, last/first 20 s "
            f"{r['last_over_first']}, first audio p50 {r['ttfa_p50_ms']:.0f} ms, peak {r['peak_replicas']} replicas"
        )
    sizes = {size for r in results.values() for size in r["audio_bytes"]}
    return {
        "model": model,
        "text": TEXT,
        "clients": clients,
        "seconds": seconds,
        "results": results,
        "throughput_speedup": ratio(
            results["autoscaling"]["completed_per_s"], results["one_replica"]["completed_per_s"]
        ),
        "failed": len(sizes) != 1,
    }


def render(result: dict) -> str:
    rows = [
        [
            name,
            r["requests"],
            r["completed_per_s"],
            r["last_over_first"],
            r["ttfa_p50_ms"],
            r["ttfa_p95_ms"],
            r["peak_replicas"],
        ]
        for name, r in result["results"].items()
    ]
    out = table(
        [
            "TTS",
            "requests",
            "completed/s",
            "last 20 s / first 20 s",
            "first audio p50 ms",
            "first audio p95 ms",
            "peak replicas",
        ],
        rows,
    )
    over_time = table(
        ["t s"] + [f"{n} {k}" for n in result["results"] for k in ("req/s", "TTFA p50 ms", "replicas")],
        [
            [b["t_s"]]
            + [
                x
                for n in result["results"]
                for x in (
                    result["results"][n]["buckets"][i]["completed_per_s"],
                    result["results"][n]["buckets"][i]["ttfa_p50_ms"],
                    result["results"][n]["buckets"][i]["replicas"],
                )
            ]
            for i, b in enumerate(result["results"]["autoscaling"]["buckets"])
        ],
    )
    s = result["throughput_speedup"]
    return (
        f"{out}\n\n{result['clients']} clients for {result['seconds']:.0f} s: autoscaling / one replica throughput = "
        + ("-" if s is None else f"{s:.3g}")
        + f"\n\n{over_time}"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, r in result["results"].items():
        t = [b["t_s"] for b in r["buckets"]]
        for ax, key in zip(axes, ("completed_per_s", "ttfa_p50_ms", "replicas")):
            ax.step(t, [b[key] for b in r["buckets"]], where="post", label=name)
    for ax, label in zip(axes, ("completed requests / s", "time to first audio p50 (ms)", "running TTS replicas")):
        ax.set_xlabel("seconds since the burst started")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(f"sustained TTS burst, {result['clients']} clients, shipped config ({result['model']})")
    return saved(plt, fig, path, dpi=90)
