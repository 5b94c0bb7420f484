"""Scenario `embeddings`: inputs embedded per second at 1, 8 and 32 concurrent clients, through
the graph with @serve.batch (one forward pass per batch), through the graph one request at a
time (embeddings.max_batch_size 1), and with the same model called in process (the limit: the
engine embeds `clients` inputs per forward pass, no HTTP, no Serve).

Each client sends single-sentence requests back to back (the openai SDK's shape, float
vectors); the three systems are interleaved, their order rotating each round, and each figure
is the median over rounds. The vectors must agree across the three systems within float tolerance, else the
scenario fails: batching may not change an embedding.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Optional

import httpx
import numpy as np

from bench.cluster import BenchCluster, wait_ready
from bench.report import pyplot, saved, table
from bench.stats import median_over_repeats, ratio

SENTENCES = (
    "How do I bake bread at home?",
    "The train to the airport leaves every twenty minutes.",
    "Please send the quarterly report to the finance team before Friday.",
    "A dog runs across the park chasing a red ball.",
    "What is the capital of France?",
    "Turn left at the next traffic light and the station is on your right.",
    "The meeting was moved to Thursday afternoon.",
    "Solar panels convert sunlight into electricity.",
)
SYSTEMS = ("batched", "one_at_a_time", "in_process")
TOLERANCE = 1e-4


async def graph_round(http: httpx.AsyncClient, url: str, clients: int, per_client: int, seen: dict) -> dict:
    async def client(c: int) -> None:
        for i in range(per_client):
            text = SENTENCES[(c + i) % len(SENTENCES)]
            r = await http.post(f"{url}/v1/embeddings", json={"input": text, "encoding_format": "float"})
            r.raise_for_status()
            seen.setdefault(text, np.array(r.json()["data"][0]["embedding"], dtype=np.float32))

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - start
    return {"inputs": clients * per_client, "seconds": elapsed, "inputs_per_s": clients * per_client / elapsed}


async def in_process_round(engine, tokens: list[list[int]], clients: int, per_client: int, seen: dict) -> dict:
    start = time.perf_counter()
    for i in range(per_client):  # each step: one input per client, in one forward pass
        batch = [tokens[(c + i) % len(tokens)] for c in range(clients)]
        rows = await engine.embed(batch)
        for c, row in enumerate(rows):
            seen.setdefault(SENTENCES[(c + i) % len(SENTENCES)], row)
    elapsed = time.perf_counter() - start
    return {"inputs": clients * per_client, "seconds": elapsed, "inputs_per_s": clients * per_client / elapsed}


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    from deployments.embeddings.config import EmbeddingsSlotConfig
    from deployments.embeddings.engine import EmbeddingsEngine
    from deployments.embeddings.minilm import ensure_minilm

    model = EmbeddingsSlotConfig().default_model
    levels = [1, 8] if opts.smoke else [1, 8, 32]
    per_client = 2 if opts.smoke else 8 if opts.preset == "quick" else 24
    rounds = 1 if opts.smoke else 3
    sizes = {"batched": 32, "one_at_a_time": 1}
    urls, seen = {}, {system: {} for system in SYSTEMS}
    measured: dict = {system: {c: [] for c in levels} for system in SYSTEMS}
    engine = None
    try:
        for system, size in sizes.items():
            args = {"enabled": True, "default_model": model, "max_batch_size": size}
            urls[system] = cluster.deploy(
                f"bench-emb-{system}", {"embeddings": args}, {"Embeddings": {"num_replicas": 1}}
            )
            await wait_ready(urls[system])
            progress(f"embeddings: {system} is up")
        engine = await EmbeddingsEngine.start(model, ensure_minilm(cache_dir))
        tokens = engine.tokenize(list(SENTENCES))
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=64)) as http:

            async def measure(system: str, clients: int) -> dict:
                if system == "in_process":
                    return await in_process_round(engine, tokens, clients, per_client, seen[system])
                return await graph_round(http, urls[system], clients, per_client, seen[system])

            for system in SYSTEMS:  # warm-up
                await measure(system, 1)
            for rep in range(rounds):  # systems interleaved, their order rotating each round
                order = list(SYSTEMS[rep % 3 :]) + list(SYSTEMS[: rep % 3])
                for clients in levels:
                    for system in order:
                        m = await measure(system, clients)
                        measured[system][clients].append(m)
                        progress(f"embeddings: round {rep + 1} {system} x{clients}: {m['inputs_per_s']:.1f} inputs/s")
    finally:
        for system in urls:
            cluster.delete(f"bench-emb-{system}")
        if engine is not None:
            engine.shutdown()
    worst = max(
        float(np.abs(seen[system][text] - seen["in_process"][text]).max()) for system in sizes for text in seen[system]
    )
    results = {
        system: {str(c): {**median_over_repeats(ms), "rounds": ms} for c, ms in by_level.items()}
        for system, by_level in measured.items()
    }
    top = str(levels[-1])
    gain = ratio(results["batched"][top]["inputs_per_s"], results["one_at_a_time"][top]["inputs_per_s"])
    return {
        "model": model,
        "levels": levels,
        "requests_per_client": per_client,
        "rounds": rounds,
        "results": results,
        "max_abs_difference": worst,
        "failed": worst > TOLERANCE,
        "targets": {
            f"batched_vs_one_at_a_time_at_{top}": {
                "value": gain,
                "target": "> 1",
                "met": None if gain is None else gain > 1,
            }
        },
    }


def render(result: dict) -> str:
    levels = [str(c) for c in result["levels"]]
    rows = [[system, *[result["results"][system][c]["inputs_per_s"] for c in levels]] for system in result["results"]]
    out = table(["system", *[f"{c} clients, inputs/s" for c in levels]], rows)
    ((name, t),) = result["targets"].items()
    value = "-" if t["value"] is None else f"{t['value']:.3g}"
    return (
        f"{out}\n\nLargest difference between systems' vectors: {result['max_abs_difference']:.2g} "
        f"(tolerance {TOLERANCE:g})\n- {name}: {value} (target {t['target']})"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    levels = [str(c) for c in result["levels"]]
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for system, by_level in result["results"].items():
        ax.plot([int(c) for c in levels], [by_level[c]["inputs_per_s"] for c in levels], marker="o", label=system)
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("inputs / s")
    ax.set_xscale("log", base=2)
    ax.legend()
    ax.set_title(f"Embeddings throughput, {result['model']}")
    return saved(plt, fig, path, dpi=90)
