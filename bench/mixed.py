"""Scenario `mixed`: chat latency while the other modalities work, the graph's reason to exist.

Two systems, each measured twice in one run, chat alone and then under mixed load:
- graph: one app of this graph with the LLM, ASR, TTS and image slots and the shipped
  `deployments:` options (resources, autoscaling);
- separate_servers: OminiX-API's recommended workaround, one server per modality side by side
  on the same machine: `mlx_lm.server` for chat, `mlx_audio.server` for ASR and TTS. No image
  server takes part there (mflux ships none), so its mixed load is lighter by the image job.

Chat: `CHAT_STREAMS` streams send streamed chat requests back to back (`tokens` tokens each, the
benchmark model, greedy). The mixed load, started before chat is measured and running through
it: `ASR_CLIENTS` clients transcribing an espeak-ng utterance back to back (Whisper tiny.en),
`TTS_STREAMS` clients speaking a sentence back to back (Kokoro-82M, `af_heart`), and (graph only)
one image generation job after another. Every system serves the same model directories.

Reported per system and load: chat TTFT and ITL p50/p95, chat tokens/s, and the background
requests completed; the headline is each system's slowdown (mixed p50 over alone p50).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Optional

import httpx

from bench.asr import utterance_wavs
from bench.cluster import BenchCluster, wait_ready
from bench.llm import Timing, bench_model, chat_body, prompt_text, stream_chat
from bench.peers import mlx_audio_server, mlx_lm_server
from bench.report import percentile_bars, pyplot, saved, table
from bench.shipped import shipped_app
from bench.stats import percentile, ratio

SYSTEMS = ("graph", "separate_servers")
LOADS = ("alone", "mixed")
CHAT_STREAMS, ASR_CLIENTS, TTS_STREAMS = 4, 8, 4
UTTERANCE = "Please send the quarterly report to the finance team before Friday."
SPEECH = "Hello there, how are you today?"
VOICE = "af_heart"
IMAGE = {"prompt": "a lighthouse at dusk", "size": "256x256", "steps": 4, "seed": 7}

Call = Callable[[httpx.AsyncClient], Awaitable[None]]


async def back_to_back(http: httpx.AsyncClient, call: Call, stop: asyncio.Event, done: list, errors: list) -> None:
    """One background client: a request, its whole answer, the next, until `stop`."""
    while not stop.is_set():
        try:
            await call(http)
            done.append(time.monotonic())
        except Exception as e:  # counted, shown, and the scenario fails: unequal work otherwise
            errors.append(f"{type(e).__name__}: {e}"[:300])
            await asyncio.sleep(1)


def post(url: str, **kwargs) -> Call:
    async def call(http: httpx.AsyncClient) -> None:
        r = await http.post(url, **kwargs)
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {r.text[:200]}")

    return call


class System:
    """What one system serves: a chat call, and the background calls of its mixed load."""

    def __init__(self, chat_url: str, background: dict[str, tuple[int, Call]]):
        self.chat_url = chat_url
        self.background = background


async def measure_chat(http: httpx.AsyncClient, url: str, seconds: float, tokens: int, round_id: int) -> list:
    stop_at, timings = time.monotonic() + seconds, []

    async def stream(i: int) -> None:
        n = 0
        while time.monotonic() < stop_at:
            body = chat_body(prompt_text(round_id * 1000 + i, n), tokens)
            timings.append(await stream_chat(http, url, body))
            n += 1

    await asyncio.gather(*(stream(i) for i in range(CHAT_STREAMS)))
    return timings


def chat_metrics(timings: list[Timing]) -> dict:
    ttft = [(t.first - t.start) * 1000 for t in timings if t.first is not None]
    itl = [(t.end - t.first) * 1000 / (t.tokens - 1) for t in timings if t.first is not None and t.tokens > 1]
    wall = max(t.end for t in timings) - min(t.start for t in timings)
    return {
        "requests": len(timings),
        "tokens_per_s": sum(t.tokens for t in timings) / wall,
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p95_ms": percentile(ttft, 95),
        "itl_p50_ms": percentile(itl, 50),
        "itl_p95_ms": percentile(itl, 95),
    }


async def run_system(http: httpx.AsyncClient, system: System, seconds: float, tokens: int, progress) -> dict:
    out = {}
    for round_id, load in enumerate(LOADS):
        stop, done, errors = asyncio.Event(), {k: [] for k in system.background}, []
        workers = []
        if load == "mixed":
            for kind, (clients, call) in system.background.items():
                workers += [
                    asyncio.create_task(back_to_back(http, call, stop, done[kind], errors)) for _ in range(clients)
                ]
            await asyncio.sleep(min(10.0, seconds / 3))  # the background load is running before chat starts
        t0 = time.monotonic()
        try:
            timings = await measure_chat(http, system.chat_url, seconds, tokens, round_id)
        finally:
            stop.set()
            for worker in workers:  # what is still running is not waited for: it is not counted
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        out[load] = {
            **chat_metrics(timings),
            # Requests answered while chat was measured.
            "background_completed": {k: sum(t >= t0 for t in v) for k, v in done.items()} if load == "mixed" else {},
            "background_errors": errors[:5],
        }
        progress(f"mixed: {load}: {out[load]}")
    return out


async def graph_system(cluster: BenchCluster, model_id: str) -> System:
    shipped_args, options = shipped_app()
    args = {slot: shipped_args[slot] for slot in ("asr", "tts", "image")}  # the shipped defaults (Kokoro, ...)
    args["llm"] = {**shipped_args["llm"], "default_model": model_id, "models": []}
    url = cluster.deploy(
        "bench-mixed", args, {k: v for k, v in options.items() if k in ("Ingress", "LLM", "ASR", "TTS", "Image")}
    )
    await wait_ready(url)
    wav = utterance_wavs([UTTERANCE])[0][0]
    return System(
        f"{url}/v1/chat/completions",
        {
            "asr": (ASR_CLIENTS, post(f"{url}/v1/audio/transcriptions", files={"file": ("u.wav", wav, "audio/wav")})),
            "tts": (
                TTS_STREAMS,
                post(f"{url}/v1/audio/speech", json={"input": SPEECH, "voice": VOICE, "response_format": "wav"}),
            ),
            "image": (1, post(f"{url}/v1/images/generations", json=IMAGE)),
        },
    )


async def peer_system(model_dir: Path, cache_dir: Path, work: Path, tokens: int, peers: list) -> System:
    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en
    from deployments.tts.kokoro import ensure_kokoro

    chat = mlx_lm_server(model_dir, tokens, work / "mixed_mlx_lm_server.log")
    peers.append(chat)
    audio = mlx_audio_server(work / "mixed_mlx_audio_server.log", cache_dir)
    peers.append(audio)
    await chat.wait_ready()
    await audio.wait_ready()
    wav = utterance_wavs([UTTERANCE])[0][0]
    asr = post(
        f"{audio.url}/v1/audio/transcriptions",
        files={"file": ("u.wav", wav, "audio/wav")},
        data={"model": str(ensure_whisper_tiny_en(cache_dir)), "response_format": "json"},
    )
    tts_body = {"model": str(ensure_kokoro(cache_dir)), "input": SPEECH, "voice": VOICE, "response_format": "wav"}
    return System(
        f"{chat.url}/v1/chat/completions",
        {"asr": (ASR_CLIENTS, asr), "tts": (TTS_STREAMS, post(f"{audio.url}/v1/audio/speech", json=tts_body))},
    )


async def warm_up(http: httpx.AsyncClient, system: System, tokens: int) -> dict:
    """One request of each kind (models load on first use); a kind that fails is reported."""
    await stream_chat(http, system.chat_url, chat_body(prompt_text(-1, 0), tokens))
    failed = {}
    for kind, (_, call) in list(system.background.items()):
        try:
            await call(http)
        except Exception as e:
            failed[kind] = f"{type(e).__name__}: {e}"[:300]
    return failed


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    model_id, model_dir, _ = bench_model(opts, cache_dir)
    seconds = 4.0 if opts.smoke else 30.0 if opts.quick else 60.0  # smoke: the harness runs, no measure
    tokens = opts.tokens
    results, unavailable, peers = {}, {}, []
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
        for name in SYSTEMS:  # one after the other: each has the machine to itself
            try:
                if name == "graph":
                    system = await graph_system(cluster, model_id)
                else:
                    system = await peer_system(model_dir, cache_dir, work, tokens, peers)
                unavailable[name] = await warm_up(http, system, tokens)
                for kind in unavailable[name]:
                    del system.background[kind]
                progress(f"mixed: {name} is up" + (f"; unavailable: {unavailable[name]}" if unavailable[name] else ""))
                results[name] = await run_system(http, system, seconds, tokens, progress)
            finally:
                if name == "graph":
                    cluster.delete("bench-mixed")
                for peer in peers:
                    peer.stop()
                peers.clear()
    slowdown = {
        name: {
            metric: ratio(r["mixed"][metric], r["alone"][metric])
            for metric in ("ttft_p50_ms", "itl_p50_ms", "ttft_p95_ms")
        }
        for name, r in results.items()
    }
    errors = any(r[load]["background_errors"] for r in results.values() for load in LOADS)
    return {
        "model": {
            "llm": model_dir.name,
            "asr": "whisper-tiny.en",
            "tts": "ominix-kokoro-82m",
            "image": "built-in default",
        },
        "chat_streams": CHAT_STREAMS,
        "background": {"asr_clients": ASR_CLIENTS, "tts_streams": TTS_STREAMS, "image_jobs": 1},
        "seconds": seconds,
        "tokens": tokens,
        "results": results,
        "unavailable": unavailable,
        "slowdown": slowdown,
        "failed": errors or unavailable.get("graph") != {},
    }


def render(result: dict) -> str:
    rows = []
    for name, r in result["results"].items():
        for load in LOADS:
            m = r[load]
            rows.append(
                [
                    name,
                    load,
                    m["requests"],
                    m["tokens_per_s"],
                    m["ttft_p50_ms"],
                    m["ttft_p95_ms"],
                    m["itl_p50_ms"],
                    m["itl_p95_ms"],
                    ", ".join(f"{k} {v}" for k, v in m["background_completed"].items()) or "-",
                ]
            )
    out = table(
        [
            "system",
            "load",
            "chat requests",
            "chat tok/s",
            "TTFT p50 ms",
            "TTFT p95 ms",
            "ITL p50 ms",
            "ITL p95 ms",
            "background done",
        ],
        rows,
    )
    lines = [
        f"{name}: mixed / alone: TTFT p50 {s['ttft_p50_ms']:.2f}x, ITL p50 {s['itl_p50_ms']:.2f}x"
        for name, s in result["slowdown"].items()
        if s["ttft_p50_ms"] is not None and s["itl_p50_ms"] is not None
    ]
    missing = [
        f"{name}: not in its mixed load: {', '.join(kinds)}" for name, kinds in result["unavailable"].items() if kinds
    ]
    return "\n".join([out, "", *lines, *missing])


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    bars = {f"{name} {load}": r[load] for name, r in result["results"].items() for load in LOADS}
    percentile_bars(axes[0], bars, "ttft_p50_ms", "ttft_p95_ms", "chat time to first token (ms)")
    percentile_bars(axes[1], bars, "itl_p50_ms", "itl_p95_ms", "chat inter-token latency (ms)")
    fig.suptitle(f"chat at {result['chat_streams']} streams, alone and beside ASR, TTS and image work")
    return saved(plt, fig, path, dpi=90)
