"""Speculative decoding's speed: the engine with and without drafts, and mlx_lm.server with and
without `--draft-model`, on the same requests.

`python -m bench --scenarios speculative` or `python -m bench.speculative [--streams 1,16]`

Two workloads on the real SmolLM2-135M-Instruct, greedy (so every system generates the same
answer, drafts or not):
- edit: a ~400-token Python file in the prompt, to be written out again with one function
  renamed: what agents and coding tools spend their output on, and where prompt lookup pays;
- chat: short questions with nothing to copy: what drafting must not slow down.

Systems: the engine in process (deployments/llm/engine.py: prompt lookup off / on / on with
drafting paused while 4 or more sequences decode (`disable_by_batch_size`); a draft
model, here SmolLM2 itself, as the only other model with its tokenizer on this machine: every
guess right, every guess as costly as the served model's own step, so it shows the mechanism's
cost, not a gain), and mlx_lm.server over HTTP (plain / `--draft-model` SmolLM2, which turns
its batching off). tok/s from the tokens each system's usage reports; the engine's acceptance
rate from its counters.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Optional

from bench.report import run_alone, saved, table
from bench.stats import median, ratio

ROOT = Path(__file__).resolve().parents[1]
NEEDS_CLUSTER = False
WORKLOADS = ("edit", "chat")
ENGINE_SYSTEMS = ("engine", "engine_ngram", "engine_ngram_paused", "engine_draft")
PAUSED_AT = 4  # engine_ngram_paused: drafting pauses while 4 or more sequences decode
PEER_SYSTEMS = ("mlx_lm_server", "mlx_lm_server_draft")

# Our own file (never a fetched one): ~400 tokens of ordinary Python.
SOURCE = '''"""Inventory records for a small shop: items, stock levels and reorder rules."""

from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    price: float
    stock: int = 0
    tags: list[str] = field(default_factory=list)


def total_value(items: list[Item]) -> float:
    """The value of everything in stock, at list price."""
    return sum(item.price * item.stock for item in items)


def low_stock(items: list[Item], threshold: int = 5) -> list[Item]:
    """The items whose stock fell below the threshold, lowest first."""
    low = [item for item in items if item.stock < threshold]
    return sorted(low, key=lambda item: item.stock)


def restock(item: Item, amount: int) -> Item:
    """Add stock to an item; a negative amount is a mistake."""
    if amount < 0:
        raise ValueError("amount must not be negative")
    item.stock += amount
    return item


def find_by_tag(items: list[Item], tag: str) -> list[Item]:
    """Every item carrying the tag, in catalogue order."""
    return [item for item in items if tag in item.tags]


def price_list(items: list[Item]) -> str:
    """One line per item: its SKU, name and price."""
    lines = [f"{item.sku:<8} {item.name:<24} {item.price:>8.2f}" for item in items]
    return "\\n".join(lines)
'''
QUESTIONS = [
    "What is the capital of France?",
    "Name three primary colors.",
    "Why is the sky blue? One sentence.",
    "Give me a word that rhymes with cat.",
]


def body(workload: str, i: int, tokens: int) -> dict:
    if workload == "edit":
        content = (
            f"Request {i}. Here is a Python file:\n```python\n{SOURCE}```\n"
            "Write the whole file out again, unchanged except that the function `low_stock` is renamed "
            "to `below_threshold`. Output only the code."
        )
    else:
        content = f"Request {i}. {QUESTIONS[i % len(QUESTIONS)]}"
    return {"messages": [{"role": "user", "content": content}], "max_tokens": tokens, "temperature": 0}


async def engine_wave(engine, workload: str, streams: int, tokens: int, wave: int) -> dict:
    from bench.structured import generate, prepare

    prepared = await asyncio.gather(*(prepare(engine, body(workload, wave * 100 + i, tokens)) for i in range(streams)))
    before = engine.batch_totals()
    t0 = time.perf_counter()
    counts = [n for n, _ in await asyncio.gather(*(generate(engine, p) for p in prepared))]
    wall = time.perf_counter() - t0
    after = engine.batch_totals()
    drafted = after.drafted_tokens - before.drafted_tokens
    return {
        "tokens_per_s": sum(counts) / wall,
        "tokens": sum(counts),
        "steps": after.generation_steps - before.generation_steps,
        "acceptance": ratio(after.accepted_tokens - before.accepted_tokens, drafted) if drafted else None,
    }


async def peer_wave(http, url: str, workload: str, streams: int, tokens: int, wave: int) -> dict:
    from bench.llm import stream_chat
    from bench.structured import streamed

    bodies = [streamed(body(workload, wave * 100 + i, tokens)) for i in range(streams)]
    t0 = time.perf_counter()
    timings = await asyncio.gather(*(stream_chat(http, url, b) for b in bodies))
    wall = max(t.end for t in timings) - t0
    return {"tokens_per_s": sum(t.tokens for t in timings) / wall, "tokens": sum(t.tokens for t in timings)}


async def measure_engines(model_dir: Path, streams: list[int], tokens: dict, repeats: int, progress) -> dict:
    from deployments.llm.config import LLMSlotConfig, SpeculativeConfig
    from deployments.llm.engine import LLMEngine

    configs = {
        "engine": LLMSlotConfig(),
        "engine_ngram": LLMSlotConfig(speculative=SpeculativeConfig(method="ngram")),
        "engine_ngram_paused": LLMSlotConfig(
            speculative=SpeculativeConfig(method="ngram", disable_by_batch_size=PAUSED_AT)
        ),
        "engine_draft": LLMSlotConfig(
            speculative=SpeculativeConfig(method="draft", draft_model=str(model_dir), num_speculative_tokens=3)
        ),
    }
    out: dict = {}
    for system, slot in configs.items():
        config = slot.engine_config(draft_dir=model_dir if slot.speculative and slot.speculative.draft_model else None)
        config.prefix_cache_entries = 0  # every wave prefills its prompts: the systems do the same work
        engine = await LLMEngine.start(system, model_dir, config)
        try:
            await engine_wave(engine, "chat", 2, 4, -1)  # first shapes, first allocations
            for workload in WORKLOADS:
                for n in streams:
                    runs = [await engine_wave(engine, workload, n, tokens[workload], r) for r in range(repeats)]
                    out.setdefault(workload, {}).setdefault(str(n), {})[system] = _median(runs)
                    progress(f"speculative: {system} {workload} {n} streams: {_median(runs)['tokens_per_s']:.1f} tok/s")
        finally:
            engine.shutdown()
    return out


async def measure_peers(
    model_dir: Path, streams: list[int], tokens: dict, repeats: int, work: Path, progress, out: dict
):
    import httpx

    from bench.llm import stream_chat
    from bench.peers import mlx_lm_server
    from bench.structured import streamed

    http = httpx.AsyncClient(timeout=httpx.Timeout(900), limits=httpx.Limits(max_connections=64))
    try:
        for system in PEER_SYSTEMS:
            draft = ("--draft-model", str(model_dir), "--num-draft-tokens", "3") if system.endswith("draft") else ()
            server = mlx_lm_server(model_dir, max(tokens.values()), work / f"{system}.log", extra=draft)
            try:
                await server.wait_ready()
                url = f"{server.url}/v1/chat/completions"
                await stream_chat(http, url, streamed(body("chat", -1, 4)))
                for workload in WORKLOADS:
                    for n in streams:
                        runs = [await peer_wave(http, url, workload, n, tokens[workload], r) for r in range(repeats)]
                        out[workload][str(n)][system] = _median(runs)
                        progress(
                            f"speculative: {system} {workload} {n} streams: {_median(runs)['tokens_per_s']:.1f} tok/s"
                        )
            finally:
                server.stop()
    finally:
        await http.aclose()


def _median(runs: list[dict]) -> dict:
    keys = {k for r in runs for k in r}
    return {k: median(r.get(k) for r in runs) for k in sorted(keys)}


async def measure(cache_dir: Path, streams: list[int], tokens: dict, repeats: int, work: Path, progress, peer: bool):
    from deployments.llm.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2(cache_dir)
    levels = await measure_engines(model_dir, streams, tokens, repeats, progress)
    if peer:
        await measure_peers(model_dir, streams, tokens, repeats, work, progress, levels)
    for by_streams in levels.values():
        for level in by_streams.values():
            base = level["engine"]["tokens_per_s"]
            level["ngram_speedup"] = ratio(level["engine_ngram"]["tokens_per_s"], base)
            if "engine_ngram_paused" in level:
                level["paused_speedup"] = ratio(level["engine_ngram_paused"]["tokens_per_s"], base)
            level["draft_speedup"] = ratio(level["engine_draft"]["tokens_per_s"], base)
            if "mlx_lm_server" in level:
                level["peer_draft_speedup"] = ratio(
                    level["mlx_lm_server_draft"]["tokens_per_s"], level["mlx_lm_server"]["tokens_per_s"]
                )
    return {"model": model_dir.name, "tokens": tokens, "levels": levels}


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    smoke = opts.preset == "smoke"
    streams = [1, 2] if smoke else [1, 16]
    tokens = {"edit": 24, "chat": 8} if smoke else {"edit": 256, "chat": 64}
    return await measure(cache_dir, streams, tokens, 1 if smoke else 2, work, progress, peer=not smoke)


def render(result: dict) -> str:
    rows = []
    for workload, by_streams in result["levels"].items():
        for n, level in by_streams.items():
            for system in ENGINE_SYSTEMS + PEER_SYSTEMS:
                m = level.get(system)
                if m is None:
                    continue
                speedup = {
                    "engine_ngram": level.get("ngram_speedup"),
                    "engine_ngram_paused": level.get("paused_speedup"),
                    "engine_draft": level.get("draft_speedup"),
                    "mlx_lm_server_draft": level.get("peer_draft_speedup"),
                }.get(system)
                rows.append([workload, n, system, m["tokens_per_s"], speedup, m.get("acceptance")])
    return table(["workload", "streams", "system", "tok/s", "vs without drafts", "acceptance"], rows)


def plot(result: dict, path: Path) -> Optional[Path]:
    from bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return None
    systems = ENGINE_SYSTEMS + PEER_SYSTEMS
    labels, values = [], {s: [] for s in systems}
    for workload, by_streams in result["levels"].items():
        for n, level in by_streams.items():
            labels.append(f"{workload}\n{n} streams")
            for s in systems:
                values[s].append((level.get(s) or {}).get("tokens_per_s") or 0)
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(systems)
    for k, s in enumerate(systems):
        ax.bar(
            [i + (k - (len(systems) - 1) / 2) * width for i in range(len(labels))],
            values[s],
            width,
            label=s,
            hatch="//" if "server" in s else None,
        )
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.set_title("Speculative decoding, SmolLM2-135M, greedy")
    ax.legend(fontsize=7)
    return saved(plt, fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speculative", description=__doc__)
    p.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16])
    p.add_argument("--edit-tokens", type=int, default=256)
    p.add_argument("--chat-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    tokens = {"edit": opts.edit_tokens, "chat": opts.chat_tokens}

    def run_it(progress, work):
        return measure(opts.cache_dir, opts.streams, tokens, opts.repeats, work, progress, not opts.no_peer)

    return run_alone(sys.modules[__name__], "speculative", run_it, opts.out, argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
