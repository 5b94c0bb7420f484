"""What the prompt cache's disk tier saves when an LLM replica restarts: the time to first token
of the first request after the restart that shares a long prefix (a system prompt) with requests
served before it, against a cold prefill of that prefix.

Side by side on the benchmark model: this graph with its disk tier (deployments/llm/
disk_cache.py), the same graph with `llm.disk_cache_bytes: 0` (RAM tier only, lost with the
replica), and mlx_lm.server (its prompt cache is in RAM only: after its restart every prefix is
cold). Each repeat, per system: a cold request on a prefix no system has seen (its TTFT is the
cold prefill), a second request with another question on it (the prefix's second sight, which
is what puts it on the disk tier: deployments/llm/admission.py; a prefix seen once stays in
RAM), the replica (or server) restarted, then a third question on the same prefix. Reports the
cold and the after-restart TTFTs, their ratio (the target: at most 0.2 with the disk tier) and
the cached tokens each system reports. Not in the default set:

    .venv/bin/python -m bench --scenarios restart [--quick | --smoke]
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.llm import stream_chat
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.peers import mlx_lm_server
from bench.prefix import body, system_prompt
from bench.report import pyplot, saved, table
from bench.stats import median_over_repeats, ratio
from deployments.llm.disk_cache import PROMPT_CACHE_DIR

SYSTEMS = {
    "graph": "this graph (disk tier)",
    "graph_no_disk_tier": "graph, disk tier off",
    "mlx_lm_server": "mlx_lm.server (peer)",
}
# About 1.9 tokens a word with the benchmark model's tokenizer (3300 words made 6396 tokens, past
# its 4096-token context): 2000 words make a ~3.9k-token prefix, room left for the question.
PREFIX_WORDS = {"full": 2000, "quick": 2000, "smoke": 300}
WRITE_TIMEOUT_S = 120


def summarize(cold: float, after: float, cached: Optional[int], prompt: Optional[int]) -> dict:
    """One repeat's figures (TTFTs in ms)."""
    return {
        "cold_ttft_ms": cold,
        "after_restart_ttft_ms": after,
        "after_restart_vs_cold": ratio(after, cold),
        "after_restart_cached_tokens": cached,
        "prompt_tokens": prompt,
    }


class _Graph:
    """A graph app whose LLM replicas restart by being killed (Serve starts new ones)."""

    def __init__(self, cluster: BenchCluster, name: str, model_dir: Path, cache_dir: Path, disk: bool):
        self.cluster, self.name, self.cache_dir, self.disk = cluster, name, cache_dir, disk
        llm = {"default_model": str(model_dir), **({} if disk else {"disk_cache_bytes": 0})}
        self.url = cluster.deploy(name, {"cache_dir": str(cache_dir), "llm": llm})

    async def ready(self) -> None:
        await wait_ready(self.url)

    def entries(self) -> set[Path]:
        return set((self.cache_dir / PROMPT_CACHE_DIR).rglob("*.json"))

    async def written(self, before: set[Path]) -> None:
        """Until the disk tier holds an entry it did not hold `before` (the shared prefix)."""
        if not self.disk:
            return
        for _ in range(WRITE_TIMEOUT_S * 10):
            if self.entries() - before:
                return
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.name}: the disk tier wrote nothing in {WRITE_TIMEOUT_S} s")

    async def restart(self) -> None:
        await asyncio.to_thread(self.cluster.restart_replicas, self.name, "LLM")
        await wait_ready(self.url)

    def stop(self) -> None:
        self.cluster.delete(self.name)


class _Peer:
    """mlx_lm.server: a restart is a new process."""

    def __init__(self, model_dir: Path, tokens: int, log: Path):
        self.model_dir, self.tokens, self.log = model_dir, tokens, log
        self.server = mlx_lm_server(model_dir, tokens, log)
        self.url = self.server.url

    async def ready(self) -> None:
        await self.server.wait_ready()

    def entries(self) -> set[Path]:
        return set()

    async def written(self, before: set[Path]) -> None:
        return None

    async def restart(self) -> None:
        self.server.stop()
        self.server = mlx_lm_server(self.model_dir, self.tokens, self.log)
        self.url = self.server.url
        await self.server.wait_ready()

    def stop(self) -> None:
        self.server.stop()


async def one_restart(http: httpx.AsyncClient, system, prefix: str, tokens: int) -> dict:
    def ask(question: str) -> dict:
        return body([{"role": "system", "content": prefix}, {"role": "user", "content": question}], tokens)

    cold = await stream_chat(http, f"{system.url}/v1/chat/completions", ask("Tell a story about a fox."))
    before = system.entries()
    second = await stream_chat(http, f"{system.url}/v1/chat/completions", ask("Tell a story about a cat."))
    await system.written(before)
    await system.restart()
    after = await stream_chat(http, f"{system.url}/v1/chat/completions", ask("Tell a story about a river."))
    for t in (cold, second, after):
        if t.tokens != tokens:
            raise RuntimeError(f"unequal work: asked for {tokens} tokens, got {t.tokens}")
    return summarize(
        (cold.first - cold.start) * 1000, (after.first - after.start) * 1000, after.cached_tokens, after.prompt_tokens
    )


async def run(cluster: Optional[BenchCluster], cache_dir: Path, work: Path, opts, progress) -> dict:
    config = SMOKE_CONFIG if opts.smoke else BENCH_CONFIG
    model_dir = ensure_bench_model(cache_dir, config)
    tokens = min(opts.tokens, 8)
    words = PREFIX_WORDS[opts.preset]
    http = httpx.AsyncClient(timeout=httpx.Timeout(600))
    systems: dict = {}
    try:
        for name in SYSTEMS:
            if name == "mlx_lm_server":
                systems[name] = _Peer(model_dir, tokens, work / "mlx_lm_server_restart.log")
            else:
                disk = name == "graph"
                app = "bench-restart-disk" if disk else "bench-restart-no-disk"
                systems[name] = _Graph(cluster, app, model_dir, work / app, disk)
            await systems[name].ready()
            progress(f"restart: {name} is up")
        runs: dict = {name: [] for name in SYSTEMS}
        for rep in range(opts.repeats):
            for name, system in systems.items():
                # A prefix no system has seen: the first request is a cold prefill.
                prefix = f"Repeat {rep}, {name}. {system_prompt(words)}"
                m = await one_restart(http, system, prefix, tokens)
                runs[name].append(m)
                progress(
                    f"restart: repeat {rep + 1}/{opts.repeats} {name}: cold TTFT {m['cold_ttft_ms']:.0f} ms, "
                    f"after restart {m['after_restart_ttft_ms']:.0f} ms ({m['after_restart_cached_tokens']} cached)"
                )
    finally:
        await http.aclose()
        for system in systems.values():
            system.stop()
    results = {name: {**median_over_repeats(r), "repeats": r} for name, r in runs.items()}
    return {
        "model": model_dir.name,
        "tokens_per_request": tokens,
        "prefix_words": words,
        "repeats": opts.repeats,
        "results": results,
    }


def render(result: dict) -> str:
    rows = [
        [
            SYSTEMS[name],
            m["cold_ttft_ms"],
            m["after_restart_ttft_ms"],
            m["after_restart_vs_cold"],
            m["after_restart_cached_tokens"],
            m["prompt_tokens"],
        ]
        for name, m in result["results"].items()
    ]
    out = table(
        ["system", "cold TTFT ms", "after restart TTFT ms", "after / cold", "cached tokens", "prompt tokens"], rows
    )
    return out + (
        f"\n\nA {result['prefix_words']}-word shared prefix, two requests before the restart (the "
        "cold one timed; the second puts the prefix on disk) and one after; the target with the "
        "disk tier: after / cold at most 0.2"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    results = result["results"]
    names = list(results)
    x = range(len(names))
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.bar([i - 0.2 for i in x], [results[n]["cold_ttft_ms"] for n in names], width=0.4, label="cold")
    ax.bar([i + 0.2 for i in x], [results[n]["after_restart_ttft_ms"] for n in names], width=0.4, label="after restart")
    ax.set_xticks(list(x), names)
    ax.set_title("TTFT ms on a shared prefix")
    ax.legend()
    return saved(plt, fig, path)
