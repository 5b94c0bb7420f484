"""Scenario 1, LLM serving: the same model, the same requests, four ways, in one run.

- graph: this Serve graph over HTTP (OpenAI streaming chat route), continuous batching on;
- graph_no_batching: the same graph decoding one sequence at a time (OminiX-API's single thread);
- mlx_lm_server: `mlx_lm.server` (the peer, with its own continuous batching) on the same model dir;
- in_process: `LLMEngine` called in this process, no server at all (the limit).

On request (`--llm-systems`), each system in its best configuration on this machine, as the
performance issue's headline asks: `graph_per_core` (one LLM replica per core, each with one BLAS
thread, the requests spread by the slot's router) and `mlx_lm_server_all_cores` (one server
process, one OpenBLAS thread per core). `best_configuration_vs_peer_at_16` compares the better
graph against the better peer.

Each request asks for exactly `tokens` tokens (greedy; the benchmark model never wins with EOS and
the graph also gets `ignore_eos`); every response's `usage.completion_tokens` is checked. One wave
of `c` simultaneous requests per (concurrency, repeat, system); systems are interleaved and their
order rotates each repeat so drift on a shared machine spreads evenly. Figures are medians over
repeats; headline figures are ratios within this run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model, ensure_form, parameter_count
from bench.peers import mlx_lm_server
from bench.report import pyplot, saved, table
from bench.stats import median_over_repeats, percentile, ratio

SYSTEMS = ("graph", "mlx_lm_server", "in_process", "graph_no_batching", "graph_per_core", "mlx_lm_server_all_cores")
LABELS = {
    "graph": "this graph (HTTP)",
    "mlx_lm_server": "mlx_lm.server (peer)",
    "in_process": "in-process engine (limit)",
    "graph_no_batching": "graph, batching off",
    "graph_per_core": "this graph, one LLM replica per core",
    "mlx_lm_server_all_cores": "mlx_lm.server, one BLAS thread per core",
}
GRAPHS = ("graph", "graph_per_core")
PEERS = ("mlx_lm_server", "mlx_lm_server_all_cores")


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Timing:
    start: float
    first: Optional[float]
    end: float
    tokens: int
    text: str = ""  # the answer, when asked for (bench/prefix.py sends it back as history)
    cached_tokens: Optional[int] = None  # usage.prompt_tokens_details.cached_tokens, if reported
    prompt_tokens: Optional[int] = None  # usage.prompt_tokens


def prompt_text(round_id: int, i: int) -> str:
    # Distinct prompts that differ from their first character: mlx_lm.server keeps a prefix
    # cache and skips the prefill of whatever a prompt shares with an earlier one (numbered
    # prompts such as "Round 1 request 2: ..." let it reuse up to a third of each prompt). This
    # measures serving, not cache hits (bench/prefix.py measures the prefix caches).
    tag = hashlib.sha1(f"{round_id}/{i}".encode()).hexdigest()[:8]
    return f"{tag} tell a long story about the quick brown fox and the lazy dog."


def chat_body(text: str, tokens: int) -> dict:
    return {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,  # honoured by this graph (and vLLM); mlx_lm.server ignores the field
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _has_text(chunk: dict) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
            return True
    return False


CONNECT_RETRIES = 3


async def stream_chat(http: httpx.AsyncClient, url: str, body: dict, keep_text: bool = False) -> Timing:
    """One streamed chat request. A connection dropped before any response (a listen backlog
    overflowing under a burst of new connections) is retried; the wait counts in its TTFT."""
    start = time.perf_counter()
    for attempt in range(CONNECT_RETRIES + 1):
        try:
            return await _stream_once(http, url, body, start, keep_text)
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError) as e:
            if getattr(e, "response_started", False) or attempt == CONNECT_RETRIES:
                raise
            await asyncio.sleep(0.2)
    raise AssertionError("unreachable")


async def _stream_once(http: httpx.AsyncClient, url: str, body: dict, start: float, keep_text: bool) -> Timing:
    stream = http.stream("POST", url, json=body)
    r = await stream.__aenter__()  # a transport error here: nothing was received, retry is fair
    try:
        if r.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        first, tokens, text, cached, prompt = None, None, [], None, None
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if first is None and _has_text(chunk):
                first = time.perf_counter()
            if keep_text:
                text += [(c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or []]
            if chunk.get("usage"):
                tokens, prompt = chunk["usage"]["completion_tokens"], chunk["usage"].get("prompt_tokens")
                cached = (chunk["usage"].get("prompt_tokens_details") or {}).get("cached_tokens")
                prompt = chunk["usage"].get("prompt_tokens")
    except httpx.TransportError as e:
        e.response_started = True  # part of the answer arrived: never retry (unequal work)
        raise
    finally:
        await stream.__aexit__(None, None, None)
    if tokens is None:
        raise RuntimeError(f"{url}: the stream carried no usage")
    return Timing(start, first, time.perf_counter(), tokens, "".join(text), cached, prompt)


class InProcess:
    """The engine with no server: the floor for latency, the ceiling for throughput."""

    def __init__(self, model_dir: Path):
        self.model_dir = model_dir
        self.engine = None

    async def start(self) -> None:
        from deployments.llm.config import LLMSlotConfig
        from deployments.llm.engine import LLMEngine

        self.engine = await LLMEngine.start("bench", self.model_dir, LLMSlotConfig().engine_config())

    async def request(self, body: dict) -> Timing:
        from deployments.generation.sampling import SamplingParams
        from deployments.llm.prompts import chat_prompt
        from deployments.protocol.openai import ChatCompletionRequest

        start, first, tokens, prompt_tokens = time.perf_counter(), None, None, None
        request = ChatCompletionRequest.model_validate(body)
        prompt = chat_prompt(self.engine.tokenizer, request)
        params = SamplingParams.from_request(request, request.max_tokens, {})
        async for chunk in self.engine.generate(prompt, params):
            if first is None and (chunk.content or chunk.reasoning_content):
                first = time.perf_counter()
            if chunk.usage is not None:
                tokens, prompt_tokens = chunk.usage.completion_tokens, chunk.usage.prompt_tokens
        return Timing(start, first, time.perf_counter(), tokens, prompt_tokens=prompt_tokens)

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.shutdown()


def wave_metrics(timings: list[Timing], t0: float) -> dict:
    wall = max(t.end for t in timings) - t0
    ttft = [(t.first - t.start) * 1000 for t in timings if t.first is not None]
    itl = [(t.end - t.first) * 1000 / (t.tokens - 1) for t in timings if t.first is not None and t.tokens > 1]
    prefill = [t for t in timings if t.prompt_tokens and t.first is not None]
    waiting = _union_length([(t.start, t.first) for t in prefill])
    return {
        "tokens_per_s": sum(t.tokens for t in timings) / wall,
        # Prompt tokens over the time some request was waiting for its first token: the sum of
        # TTFTs for requests in a row, the longest TTFT for simultaneous ones.
        "prompt_tokens_per_s": sum(t.prompt_tokens for t in prefill) / waiting if waiting else None,
        "ttft_p50_ms": percentile(ttft, 50),
        "ttft_p95_ms": percentile(ttft, 95),
        "itl_p50_ms": percentile(itl, 50),
        "wall_s": wall,
    }


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


# A one-stream wave is this many requests in a row: one request would make TTFT p50 a single
# sample per repeat, and the TTFT target is read at one stream.
REQUESTS_AT_ONE_STREAM = 5


async def run_wave(call: Callable[[dict], Awaitable[Timing]], c: int, round_id: int, tokens: int) -> dict:
    t0 = time.perf_counter()
    if c == 1:
        timings = [await call(chat_body(prompt_text(round_id, i), tokens)) for i in range(REQUESTS_AT_ONE_STREAM)]
    else:
        timings = await asyncio.gather(*(call(chat_body(prompt_text(round_id, i), tokens)) for i in range(c)))
    wrong = [t.tokens for t in timings if t.tokens != tokens]
    if wrong:
        raise RuntimeError(f"unequal work: asked for {tokens} tokens, got {wrong}")
    return wave_metrics(timings, t0)


async def measure(calls: dict, concurrency: list[int], repeats: int, tokens: int, progress) -> dict:
    for name, call in calls.items():
        await run_wave(call, 2, 0, tokens)  # warm-up: load, first allocations
        # Open as many connections as the largest wave will use (one token each), so no
        # measured wave pays for connection set-up (mlx_lm.server's listen backlog is 5).
        await run_wave(call, max(concurrency), 0, 1)
        progress(f"llm: warmed up {name}")
    results: dict = {name: {} for name in calls}
    round_id = 1
    for c in concurrency:
        per_system: dict = {name: [] for name in calls}
        for rep in range(repeats):
            names = list(calls)
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                per_system[name].append(await run_wave(calls[name], c, round_id, tokens))
                round_id += 1
                m = per_system[name][-1]
                progress(
                    f"llm: c={c} repeat {rep + 1}/{repeats} {name}: {m['tokens_per_s']:.1f} tok/s, "
                    f"TTFT p50 {m['ttft_p50_ms']:.0f} ms"
                )
        for name in calls:
            results[name][str(c)] = {**median_over_repeats(per_system[name]), "repeats": per_system[name]}
    return results


def targets(results: dict, concurrency: list[int]) -> dict:
    def get(system, c, key):
        return results.get(system, {}).get(str(c), {}).get(key)

    c_hi = 16 if 16 in concurrency else max(concurrency)
    c_lo = min(concurrency)
    vs_peer = ratio(get("graph", c_hi, "tokens_per_s"), get("mlx_lm_server", c_hi, "tokens_per_s"))
    best = {
        side: max((v for v in (get(s, c_hi, "tokens_per_s") for s in systems) if v is not None), default=None)
        for side, systems in (("graph", GRAPHS), ("peer", PEERS))
    }
    vs_best_peer = ratio(best["graph"], best["peer"])
    vs_limit = ratio(get("graph", c_hi, "tokens_per_s"), get("in_process", c_hi, "tokens_per_s"))
    g, lim = get("graph", c_lo, "ttft_p50_ms"), get("in_process", c_lo, "ttft_p50_ms")
    ttft_over = None if g is None or lim is None else g - lim
    return {
        f"tokens_per_s_vs_mlx_lm_server_at_{c_hi}": {
            "value": vs_peer,
            "target": ">= 1.2",
            "met": None if vs_peer is None else vs_peer >= 1.2,
        },
        f"tokens_per_s_vs_in_process_at_{c_hi}": {
            "value": vs_limit,
            "target": ">= 0.9",
            "met": None if vs_limit is None else vs_limit >= 0.9,
        },
        f"ttft_p50_over_in_process_ms_at_{c_lo}": {
            "value": ttft_over,
            "target": "<= 15",
            "met": None if ttft_over is None else ttft_over <= 15,
        },
        f"best_configuration_vs_peer_at_{c_hi}": {
            "value": vs_best_peer,
            "target": ">= 1.2",
            "met": None if vs_best_peer is None else vs_best_peer >= 1.2,
        },
        "batching_speedup_at_max_concurrency": {
            "value": ratio(
                get("graph", max(concurrency), "tokens_per_s"),
                get("graph_no_batching", max(concurrency), "tokens_per_s"),
            ),
            "target": None,
            "met": None,
        },
    }


def bench_model(opts, cache_dir: Path) -> tuple[str, Path, dict]:
    """The model every system serves: `--llm-model` (a built-in id, directory or repo id), or by
    default the random benchmark model. Its id for the graph, its directory, its config."""
    if opts.llm_model is None:
        config = SMOKE_CONFIG if opts.smoke else BENCH_CONFIG
        model_dir = ensure_form(ensure_bench_model(cache_dir, config), opts.llm_form)
        return str(model_dir), model_dir, config
    from deployments.hub import resolve_model_dir
    from deployments.llm.deployment import BUILTIN_LLMS, LLM_FILE_PATTERNS

    model_dir = resolve_model_dir(
        opts.llm_model, builtins=BUILTIN_LLMS, cache_dir=cache_dir, allow_patterns=LLM_FILE_PATTERNS
    )
    return opts.llm_model, model_dir, json.loads((model_dir / "config.json").read_text())


async def run(cluster: Optional[BenchCluster], cache_dir: Path, work: Path, opts, progress) -> dict:
    model_id, model_dir, config = bench_model(opts, cache_dir)
    progress(f"llm: model {model_id} ({parameter_count(config) / 1e6:.0f}M parameters)")
    systems = [s for s in SYSTEMS if s in opts.llm_systems]
    calls: dict = {}
    stoppers = []
    http = httpx.AsyncClient(timeout=httpx.Timeout(600), limits=httpx.Limits(max_connections=256))
    try:
        for system in systems:
            if system.startswith("graph"):
                llm = {"default_model": model_id, "models": [], "batching": system != "graph_no_batching"}
                options = {"LLM": {"num_replicas": cores()}} if system == "graph_per_core" else {}
                url = cluster.deploy(f"bench-{system.replace('_', '-')}", {"llm": llm}, options)
                await wait_ready(url)
                calls[system] = lambda body, u=url: stream_chat(http, f"{u}/v1/chat/completions", body)
            elif system.startswith("mlx_lm_server"):
                threads = cores() if system == "mlx_lm_server_all_cores" else None
                log = work / f"{system}.log"
                server = mlx_lm_server(model_dir, max(opts.tokens, 1), log, blas_threads=threads)
                stoppers.append(server.stop)
                await server.wait_ready()
                calls[system] = lambda body, u=server.url: stream_chat(http, f"{u}/v1/chat/completions", body)
            elif system == "in_process":
                engine = InProcess(model_dir)
                stoppers.append(engine.stop)
                await engine.start()
                calls[system] = engine.request
            progress(f"llm: {system} is up")
        results = await measure(calls, opts.concurrency, opts.repeats, opts.tokens, progress)
    finally:
        await http.aclose()
        for stop in stoppers:
            stop()
        for system in systems:
            if system.startswith("graph") and cluster is not None:
                try:
                    cluster.delete(f"bench-{system.replace('_', '-')}")
                except Exception:
                    pass
    return {
        "model": {
            "id": model_id if opts.llm_model else None,
            "dir_name": model_dir.name,
            "form": opts.llm_form,
            "parameters": parameter_count(config),
            "config": config,
        },
        "tokens_per_request": opts.tokens,
        "concurrency": opts.concurrency,
        "repeats": opts.repeats,
        "systems": systems,
        "results": results,
        "targets": targets(results, opts.concurrency),
    }


def render(result: dict) -> str:
    rows = []
    res = result["results"]
    for c in result["concurrency"]:
        peer = res.get("mlx_lm_server", {}).get(str(c), {}).get("tokens_per_s")
        for system in result["systems"]:
            m = res[system][str(c)]
            rows.append(
                [
                    c,
                    LABELS[system],
                    m["tokens_per_s"],
                    ratio(m["tokens_per_s"], peer),
                    m.get("prompt_tokens_per_s"),
                    m["ttft_p50_ms"],
                    m["ttft_p95_ms"],
                    m["itl_p50_ms"],
                ]
            )
    out = table(
        [
            "streams",
            "system",
            "decode tok/s",
            "× mlx_lm.server",
            "prompt tok/s",
            "TTFT p50 ms",
            "TTFT p95 ms",
            "ITL p50 ms",
        ],
        rows,
    )
    lines = [out, "", "Targets:"]
    for name, t in result["targets"].items():
        v = t["value"]
        met = {True: "met", False: "MISSED", None: "-"}[t["met"]]
        lines.append(f"- {name}: {'-' if v is None else f'{v:.3g}'} (target {t['target'] or 'none'}): {met}")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    conc = result["concurrency"]
    for system in result["systems"]:
        series = result["results"][system]
        for ax, key in zip(axes, ("tokens_per_s", "ttft_p50_ms", "itl_p50_ms")):
            ax.plot(conc, [series[str(c)][key] for c in conc], marker="o", label=LABELS[system])
    for ax, title in zip(
        axes, ("aggregate decode tokens/s", "time to first token p50 (ms)", "inter-token latency p50 (ms)")
    ):
        ax.set_xscale("log", base=2)
        ax.set_xticks(conc, [str(c) for c in conc])
        ax.set_xlabel("concurrent streams")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    name = result["model"].get("id") or f"{result['model']['parameters'] / 1e6:.0f}M-parameter Qwen3"
    fig.suptitle(
        f"LLM serving, {name}, {result['tokens_per_request']} tokens per request (medians of {result['repeats']})"
    )
    return saved(plt, fig, path, dpi=90)
