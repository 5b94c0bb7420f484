"""What the prompt (prefix) cache saves: chat requests that share a long system prompt already
in use, then the second turn of each conversation (its first turn and answer resent as history).

Side by side on the benchmark model: this graph with its prefix cache, the same graph with
`llm.prefix_cache_entries: 0`, and mlx_lm.server (which keeps a prefix cache of its own).
Reports TTFT p50/p95 per phase and the prompt tokens each system says it reused
(`usage.prompt_tokens_details.cached_tokens`); every system does the same work (greedy, ignore_eos, the
token counts checked as in the LLM scenario). Not in the default set (it answers a narrower
question than scenario 1):

    .venv/bin/python -m bench --scenarios prefix
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.llm import stream_chat
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.peers import mlx_lm_server
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import median_over_repeats, percentile, ratio

SYSTEMS = {
    "graph": "this graph (prefix cache)",
    "graph_no_prefix_cache": "graph, prefix cache off",
    "mlx_lm_server": "mlx_lm.server (peer)",
}
PHASES = ("shared_system_prompt", "second_turn")
CLIENTS = 4


VOCABULARY = "fox dog river bank tree stone cloud rain light sound story quick lazy brown old new".split()


def system_prompt(words: int) -> str:
    rng = random.Random(7)
    return "You are a careful assistant. " + " ".join(rng.choice(VOCABULARY) for _ in range(words))


def body(messages: list[dict], tokens: int) -> dict:
    return {
        "messages": messages,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def conversation_round(call, system: str, round_id: int, tokens: int) -> dict:
    """One request that puts the system prompt in use (not measured: a deployment's system
    prompt is in use all day), then CLIENTS conversations at once: their first turns (sharing
    the system prompt), then their second turns."""
    await call(body([{"role": "system", "content": system}, {"role": "user", "content": "Hello."}], tokens))
    firsts = [
        [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Round {round_id}, client {i}: tell a story."},
        ]
        for i in range(CLIENTS)
    ]
    first = await asyncio.gather(*(call(body(m, tokens)) for m in firsts))
    seconds = [
        m + [{"role": "assistant", "content": t.text}, {"role": "user", "content": "And then what happened?"}]
        for m, t in zip(firsts, first)
    ]
    second = await asyncio.gather(*(call(body(m, tokens)) for m in seconds))
    out = {}
    for phase, timings in zip(PHASES, (first, second)):
        if any(t.tokens != tokens for t in timings):
            raise RuntimeError(f"unequal work: asked for {tokens} tokens, got {[t.tokens for t in timings]}")
        ttft = [(t.first - t.start) * 1000 for t in timings]
        out[f"{phase}_ttft_p50_ms"] = percentile(ttft, 50)
        out[f"{phase}_ttft_p95_ms"] = percentile(ttft, 95)
        cached = [t.cached_tokens for t in timings if t.cached_tokens is not None]
        out[f"{phase}_cached_tokens_mean"] = sum(cached) / len(cached) if cached else None
    return out


async def run(cluster: Optional[BenchCluster], cache_dir: Path, work: Path, opts, progress) -> dict:
    config = SMOKE_CONFIG if opts.smoke else BENCH_CONFIG
    model_dir = ensure_bench_model(cache_dir, config)
    tokens = min(opts.tokens, 16)
    system = system_prompt(40 if opts.smoke else 300)
    http = httpx.AsyncClient(timeout=httpx.Timeout(600), limits=httpx.Limits(max_connections=64))
    calls, stoppers, apps = {}, [], []
    try:
        for name in SYSTEMS:
            if name == "mlx_lm_server":
                server = mlx_lm_server(model_dir, tokens, work / "mlx_lm_server_prefix.log")
                stoppers.append(server.stop)
                await server.wait_ready()
                url = server.url
            else:
                entries = 10 if name == "graph" else 0
                app = f"bench-prefix-{entries}"
                url = cluster.deploy(app, {"llm": {"default_model": str(model_dir), "prefix_cache_entries": entries}})
                apps.append(app)
                await wait_ready(url)
            calls[name] = lambda b, u=url: stream_chat(http, f"{u}/v1/chat/completions", b, keep_text=True)
            progress(f"prefix: {name} is up")
        runs: dict = {name: [] for name in SYSTEMS}
        for call in calls.values():  # warm-up, with a system prompt no round uses
            await conversation_round(call, system_prompt(20), 0, tokens)
        for rep in range(opts.repeats):
            names = list(SYSTEMS)
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                # A system prompt no system has seen: each round starts cold, then primes it.
                m = await conversation_round(calls[name], f"Round {rep}. {system}", rep + 1, tokens)
                runs[name].append(m)
                progress(
                    f"prefix: repeat {rep + 1}/{opts.repeats} {name}: shared system prompt TTFT p50 "
                    f"{m['shared_system_prompt_ttft_p50_ms']:.0f} ms, second turn {m['second_turn_ttft_p50_ms']:.0f} ms"
                )
    finally:
        await http.aclose()
        for stop in stoppers:
            stop()
        for app in apps:
            cluster.delete(app)
    results = {name: {**median_over_repeats(r), "repeats": r} for name, r in runs.items()}
    return {
        "model": model_dir.name,
        "clients": CLIENTS,
        "tokens_per_request": tokens,
        "system_prompt_chars": len(system),
        "repeats": opts.repeats,
        "results": results,
        "second_turn_ttft_vs_cache_off": ratio(
            results["graph"]["second_turn_ttft_p50_ms"], results["graph_no_prefix_cache"]["second_turn_ttft_p50_ms"]
        ),
    }


def render(result: dict) -> str:
    rows = [
        [
            SYSTEMS[name],
            m["shared_system_prompt_ttft_p50_ms"],
            m["shared_system_prompt_ttft_p95_ms"],
            m["second_turn_ttft_p50_ms"],
            m["second_turn_ttft_p95_ms"],
        ]
        for name, m in result["results"].items()
    ]
    out = table(["system", "shared system prompt: TTFT p50 ms", "p95 ms", "second turn: TTFT p50 ms", "p95 ms"], rows)
    r = result["second_turn_ttft_vs_cache_off"]
    return (
        out + f"\n\n{result['clients']} conversations at a time, a {result['system_prompt_chars']}-character system "
        f"prompt; second-turn TTFT with the cache / without: {'-' if r is None else f'{r:.3g}'}"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, phase in zip(axes, PHASES):
        percentile_bars(ax, result["results"], f"{phase}_ttft_p50_ms", f"{phase}_ttft_p95_ms", f"{phase}: TTFT ms")
    return saved(plt, fig, path)
