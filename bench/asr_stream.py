"""Streaming ASR sessions (MiniInfer's /v1/audio/stream/sessions): 1, 4 and 8 live sessions at
once, each streaming the same espeak-ng speech (two sentences and a pause) in 0.5 s chunks,
paced at real time, on the shipped ASR settings and the default Whisper tiny.en; side by side,
in the same run, mlx-audio's own server (`python -m mlx_audio.server`, its realtime
transcription WebSocket `/v1/audio/transcriptions/realtime`) on the same model directory.

Reports, for both where they apply:
- chunk round trip p50/p95 (a chunk's POST to its answer; the graph only: mlx-audio's
  WebSocket does not answer chunks);
- speech start -> first partial (the first provisional text of each utterance, from the moment
  its speech began in the stream);
- speech end -> final (from the moment an utterance's speech ended to the finalised text; it
  includes each server's pause detection: 0.7 s here, 0.5 s in mlx-audio);
- the finish request's latency (the graph).
Every graph session must finalise the same text: the scenario fails otherwise.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Optional

import httpx
import numpy as np

from bench.cluster import BenchCluster, wait_ready
from bench.peers import mlx_audio_server
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import percentile

SESSIONS = (1, 4, 8)
CHUNK_S = 0.5
RATE = 16000
TEXTS = ("Please send the quarterly report to the finance team.", "Thank you very much.")
ROUTE = "/v1/audio/stream/sessions"
SYSTEMS = ("graph", "mlx_audio_server")


def speech() -> tuple[bytes, list[tuple[float, float]]]:
    """The PCM16 stream and each utterance's (start, end) in stream seconds."""
    from tests.speech import silence, speak

    parts = [silence(0.3), speak(TEXTS[0]), silence(1.0), speak(TEXTS[1]), silence(1.0)]
    edges = np.cumsum([0] + [len(p) for p in parts]) / RATE
    audio = np.concatenate(parts)
    pcm = np.clip(np.round(audio * 32768), -32768, 32767).astype("<i2").tobytes()
    return pcm, [(edges[1], edges[2]), (edges[3], edges[4])]


def chunks(pcm: bytes):
    step = int(CHUNK_S * RATE) * 2
    return [pcm[i : i + step] for i in range(0, len(pcm), step)]


async def paced(t0: float, n: int) -> None:
    await asyncio.sleep(max(0.0, t0 + n * CHUNK_S - time.perf_counter()))  # real-time pacing


async def graph_session(http: httpx.AsyncClient, url: str, pcm: bytes, spans) -> dict:
    sid = (await http.post(f"{url}{ROUTE}")).raise_for_status().json()["sid"]
    rtts, partials, finals = [], {}, []
    t0 = time.perf_counter()
    for n, chunk in enumerate(chunks(pcm)):
        await paced(t0, n)
        sent = time.perf_counter()
        answer = (await http.post(f"{url}{ROUTE}/{sid}", content=chunk)).raise_for_status().json()
        now = time.perf_counter()
        rtts.append(now - sent)
        utterance = len(answer["segments"])  # the open utterance's index
        if answer["partial"] and utterance < len(spans):
            partials.setdefault(utterance, now - (t0 + spans[utterance][0]))
        while len(finals) < min(utterance, len(spans)):
            finals.append(now - (t0 + spans[len(finals)][1]))
    sent = time.perf_counter()
    final = (await http.post(f"{url}{ROUTE}/{sid}", params={"finish": 1})).raise_for_status().json()
    return {
        "rtts": rtts,
        "partials": list(partials.values()),
        "finals": finals,
        "finish": time.perf_counter() - sent,
        "text": final["text"],
    }


async def mlx_audio_session(url: str, model_dir: Path, pcm: bytes, spans) -> dict:
    """One client of mlx-audio's realtime WebSocket: a config message, binary PCM16 chunks,
    `{"type": "complete", "text", "is_partial"}` messages back (partials: its first 1.5 s of
    each utterance; finals: after 0.5 s of silence)."""
    import websockets

    ws_url = url.replace("http://", "ws://") + "/v1/audio/transcriptions/realtime"
    partials, finals, texts = [], [], []
    # No keepalive pings: mlx-audio decodes on its event loop, which cannot answer them meanwhile.
    async with websockets.connect(ws_url, max_size=None, open_timeout=120, ping_interval=None) as ws:
        await ws.send(json.dumps({"model": str(model_dir), "language": "en", "sample_rate": RATE}))
        ready = json.loads(await asyncio.wait_for(ws.recv(), 300))  # it loads the model first
        assert ready.get("status") == "ready", ready
        t0 = time.perf_counter()

        async def receive() -> None:
            async for raw in ws:
                message, now = json.loads(raw), time.perf_counter()
                if "is_partial" not in message:
                    continue  # token deltas
                utterance = min(len(finals), len(spans) - 1)
                if message["is_partial"]:
                    partials.append(now - (t0 + spans[utterance][0]))
                else:
                    finals.append(now - (t0 + spans[utterance][1]))
                    texts.append(message["text"].strip())
                if len(finals) == len(spans):
                    return

        reader = asyncio.create_task(receive())
        for n, chunk in enumerate(chunks(pcm)):
            await paced(t0, n)
            await ws.send(chunk)
        try:
            await asyncio.wait_for(reader, 120)
        except TimeoutError:
            reader.cancel()
    return {"rtts": [], "partials": partials, "finals": finals, "finish": None, "text": " ".join(texts)}


def summary(runs: list[dict]) -> dict:
    def p(key: str, q: int) -> Optional[float]:
        values = [x for r in runs for x in r[key]]
        return percentile(values, q) * 1000 if values else None

    finishes = [r["finish"] for r in runs if r["finish"] is not None]
    return {
        "chunk_rtt_p50_ms": p("rtts", 50),
        "chunk_rtt_p95_ms": p("rtts", 95),
        "speech_start_to_partial_p50_ms": p("partials", 50),
        "speech_end_to_final_p50_ms": p("finals", 50),
        "speech_end_to_final_p95_ms": p("finals", 95),
        "finish_p50_ms": percentile(finishes, 50) * 1000 if finishes else None,
        "chunks": sum(len(r["rtts"]) for r in runs),
        "finals": sum(len(r["finals"]) for r in runs),
    }


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.asr.config import ASRSlotConfig
    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en

    model = ASRSlotConfig().default_model
    counts = (1, 2) if opts.smoke else SESSIONS
    pcm, spans = speech()
    results: dict[str, dict] = {system: {} for system in SYSTEMS}
    texts: dict[str, list[str]] = {}
    url = cluster.deploy("bench-asr-stream", {"asr": {"enabled": True, "default_model": model}})
    try:
        await wait_ready(url)
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:
            await graph_session(http, url, pcm, spans)  # warm-up
            for n in counts:
                runs = await asyncio.gather(*(graph_session(http, url, pcm, spans) for _ in range(n)))
                results["graph"][str(n)] = summary(runs)
                texts.setdefault("graph", []).extend(r["text"] for r in runs)
                progress(f"asr_stream: graph, {n} sessions: {results['graph'][str(n)]}")
    finally:
        cluster.delete("bench-asr-stream")
    # The peer runs after the graph's app is gone, on the same Whisper directory.
    model_dir = ensure_whisper_tiny_en(cache_dir)
    peer = mlx_audio_server(work / "mlx_audio_server.log")
    try:
        await peer.wait_ready()
        await mlx_audio_session(peer.url, model_dir, pcm, spans)  # warm-up (loads the model)
        for n in counts[:2]:  # it decodes one utterance at a time on its event loop: 8 take many minutes
            runs = await asyncio.gather(*(mlx_audio_session(peer.url, model_dir, pcm, spans) for _ in range(n)))
            results["mlx_audio_server"][str(n)] = summary(runs)
            texts.setdefault("mlx_audio_server", []).extend(r["text"] for r in runs)
            progress(f"asr_stream: mlx_audio.server, {n} sessions: {results['mlx_audio_server'][str(n)]}")
    finally:
        peer.stop()
    return {
        "model": model,
        "audio_s": len(pcm) / 2 / RATE,
        "chunk_s": CHUNK_S,
        "results": results,
        "texts": {system: sorted(set(t)) for system, t in texts.items()},
        "failed": len(set(texts.get("graph", []))) != 1,
    }


def render(result: dict) -> str:
    def ms(value: Optional[float]) -> str:
        return "-" if value is None else f"{value:.0f}"

    keys = (
        "chunk_rtt_p50_ms",
        "chunk_rtt_p95_ms",
        "speech_start_to_partial_p50_ms",
        "speech_end_to_final_p50_ms",
        "speech_end_to_final_p95_ms",
        "finish_p50_ms",
    )
    rows = [
        [system, n, *(ms(m[k]) for k in keys)]
        for system, by_count in result["results"].items()
        for n, m in by_count.items()
    ]
    headers = ["system", "sessions", "chunk RTT p50 ms", "p95 ms", "speech start -> partial p50 ms",
               "speech end -> final p50 ms", "p95 ms", "finish p50 ms"]  # fmt: skip
    return (
        f"{table(headers, rows)}\n\nGraph final texts identical across sessions: {not result['failed']}"
        f"\n\nTexts: {json.dumps(result['texts'])}"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    graph = result["results"]["graph"]
    percentile_bars(a, graph, "chunk_rtt_p50_ms", "chunk_rtt_p95_ms", "graph: chunk round trip (ms)")
    for system, by_count in result["results"].items():
        counts = list(by_count)
        b.plot(counts, [by_count[n]["speech_end_to_final_p50_ms"] or 0 for n in counts], marker="o", label=system)
    b.set_title("speech end -> final p50 (ms)")
    b.set_xlabel("live sessions")
    b.legend()
    fig.suptitle(f"Streaming ASR sessions, {result['model']}, {result['chunk_s']} s chunks")
    return saved(plt, fig, path, dpi=90)
