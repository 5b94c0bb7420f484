"""Voice agent scenario: time to first audio of POST /v1/agent/stream (the LLM's answer spoken
sentence by sentence while it is written) against "whole answer, then TTS" on the same request:
POST /v1/chat/completions for the whole answer, then POST /v1/audio/speech (streamed PCM) of it.

Both run on one graph (the shipped LLM and TTS defaults, greedy decoding), alternating which
goes first; both answers must be the same text. Reported per way: time to first audio (from the
request, p50 and p95 over prompts and repeats), time to the whole audio, audio seconds.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import percentile, ratio

PROMPTS = (
    "Explain in four sentences how a rainbow forms.",
    "Describe a quiet morning in a small fishing village, in a few sentences.",
    "Give three short tips for learning to play the guitar.",
)
APP = "bench-agent"


async def pipelined(http: httpx.AsyncClient, url: str, body: dict) -> dict:
    """One agent stream: first audio, first sentence, the whole audio."""
    start, first_audio, first_text, samples, rate, sentences = time.perf_counter(), None, None, 0, 0, []
    async with http.stream("POST", f"{url}/v1/agent/stream", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"agent stream: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"agent stream failed: {event['error']['message']}")
            if event["type"] == "meta":
                rate = event["sample_rate"]
            elif event["type"] == "text":
                first_text = first_text or time.perf_counter()
                sentences.append(event["text"])
            elif event["type"] == "audio":
                first_audio = first_audio or time.perf_counter()
                samples += len(base64.b64decode(event["delta"])) // 2
    end = time.perf_counter()
    return _timing(start, first_audio, end, samples, rate, " ".join(sentences), first_text)


async def sequential(http: httpx.AsyncClient, url: str, body: dict) -> dict:
    """The whole answer from the LLM, then the whole answer to the TTS."""
    start = time.perf_counter()
    chat = {"messages": [{"role": "user", "content": body["input"]}], "max_tokens": body["max_tokens"]}
    r = await http.post(f"{url}/v1/chat/completions", json={**chat, "temperature": 0})
    r.raise_for_status()
    answer = r.json()["choices"][0]["message"]["content"]
    first_audio, size, rate = None, 0, 0
    speech = {"input": answer, "voice": body["voice"], "response_format": "pcm"}
    async with http.stream("POST", f"{url}/v1/audio/speech", json=speech) as s:
        s.raise_for_status()
        rate = int(s.headers["x-audio-sample-rate"])
        async for chunk in s.aiter_raw():
            if chunk and first_audio is None:
                first_audio = time.perf_counter()
            size += len(chunk)
    return _timing(start, first_audio, time.perf_counter(), size // 2, rate, answer)


def _timing(start, first_audio, end, samples, rate, text, first_text=None) -> dict:
    return {
        "ttfa_ms": None if first_audio is None else (first_audio - start) * 1000,
        "first_sentence_ms": None if first_text is None else (first_text - start) * 1000,
        "total_s": end - start,
        "audio_s": samples / rate if rate else 0.0,
        "text": text,
    }


def _summary(runs: list[dict]) -> dict:
    ttfa = [r["ttfa_ms"] for r in runs if r["ttfa_ms"] is not None]
    return {
        "ttfa_p50_ms": percentile(ttfa, 50),
        "ttfa_p95_ms": percentile(ttfa, 95),
        "total_p50_s": percentile([r["total_s"] for r in runs], 50),
        "audio_s_mean": sum(r["audio_s"] for r in runs) / len(runs),
        "runs": runs,
    }


def _words(text: str) -> list[str]:
    return "".join(c.lower() if c.isalnum() else " " for c in text).split()


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.llm.config import LLMSlotConfig
    from deployments.tts.config import TTSSlotConfig

    llm_model = opts.llm_model or (LLMSlotConfig().models[0] if opts.smoke else LLMSlotConfig().default_model)
    tts_model = TTSSlotConfig().default_model
    prompts = PROMPTS[:1] if opts.smoke else PROMPTS
    tokens = 24 if opts.smoke else 160
    url = cluster.deploy(APP, {"llm": {"default_model": llm_model}, "tts": {"enabled": True}})
    await wait_ready(url)
    progress(f"agent: {llm_model} -> {tts_model} is up")
    ways = {"pipelined": pipelined, "sequential": sequential}
    runs: dict[str, list[dict]] = {way: [] for way in ways}
    same: list[bool] = []
    try:
        async with httpx.AsyncClient(timeout=600) as http:
            warm = {"input": "Hi.", "max_tokens": 8, "temperature": 0, "voice": "alba"}
            await pipelined(http, url, warm)
            await sequential(http, url, warm)
            for rep in range(opts.repeats):
                for i, prompt in enumerate(prompts):
                    body = {"input": prompt, "max_tokens": tokens, "temperature": 0, "voice": "alba"}
                    order = list(ways) if (rep + i) % 2 == 0 else list(ways)[::-1]
                    got = {way: await ways[way](http, url, body) for way in order}
                    for way, result in got.items():
                        runs[way].append(result)
                    same.append(_words(got["pipelined"]["text"]) == _words(got["sequential"]["text"]))
                    progress(
                        f"agent: prompt {i + 1} repeat {rep + 1}: first audio pipelined "
                        f"{got['pipelined']['ttfa_ms']:.0f} ms, sequential {got['sequential']['ttfa_ms']:.0f} ms"
                    )
    finally:
        cluster.delete(APP)
    results = {way: _summary(r) for way, r in runs.items()}
    return {
        "llm_model": llm_model,
        "tts_model": tts_model,
        "max_tokens": tokens,
        "prompts": list(prompts),
        "repeats": opts.repeats,
        "results": results,
        "same_answer": all(same),
        "failed": not all(same) or any(r["ttfa_ms"] is None for rs in runs.values() for r in rs),
        "ttfa_speedup": ratio(results["sequential"]["ttfa_p50_ms"], results["pipelined"]["ttfa_p50_ms"]),
    }


def render(result: dict) -> str:
    rows = [
        [way, m["ttfa_p50_ms"], m["ttfa_p95_ms"], m["total_p50_s"], m["audio_s_mean"]]
        for way, m in result["results"].items()
    ]
    out = table(["agent", "first audio p50 ms", "first audio p95 ms", "whole audio p50 s", "audio s (mean)"], rows)
    s = result["ttfa_speedup"]
    return (
        f"{out}\n\n{result['llm_model']} -> {result['tts_model']}, {len(result['prompts'])} prompts x "
        f"{result['repeats']}, max_tokens {result['max_tokens']}, same answer both ways: {result['same_answer']}. "
        "Time to first audio, sequential / pipelined = " + ("-" if s is None else f"{s:.3g}")
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.8))
    percentile_bars(ax, result["results"], "ttfa_p50_ms", "ttfa_p95_ms", "time to first audio (ms)")
    fig.suptitle(f"Voice agent, {result['llm_model']} -> {result['tts_model']}")
    return saved(plt, fig, path, dpi=90)
