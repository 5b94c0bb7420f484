"""LoRA adapters mixed in one batch: what serving many adapters costs against serving the base
model alone, and against mlx_lm.server, which switches adapters per request.

`python -m bench --scenarios lora` or `python -m bench.lora [--streams 16] [--tokens 64]`

The real SmolLM2-135M-Instruct and its four example adapters (deployments/llm/example_adapters.py:
trained with mlx_lm.lora on first use; ranks 4 and 8, one DoRA, one on q and v only). Each wave
sends all its streams at once, greedy, every stream generating the same number of tokens (its
end-of-sequence tokens barred by `logit_bias`, so an adapter's short answer does not end it):

- base: every stream on the base model;
- adapters: the streams spread over the four adapters (stream i on adapter i mod 4), in one batch;
- mlx_lm.server, adapters: the same mix, each request naming its adapter's path (`adapters`, its
  per-request field): it batches requests of one adapter and reloads the model with the next
  adapter when one of another arrives;
- mlx_lm.server, base: the same waves without adapters, what its batching gives.

The engine runs in process (deployments/llm/engine.py, the shipped LLM settings, its prompt
cache off: every wave prefills its own new prompts), mlx_lm.server over HTTP on the same
directory, one BLAS thread each, the four systems' waves in turn each repeat. tok/s is generated
tokens over the wave's wall time.
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
ENGINE_SYSTEMS = ("base", "adapters")
PEER_SYSTEMS = ("mlx_lm_server_base", "mlx_lm_server_adapters")
GOAL = 0.8  # adapters' tok/s over the base's, 16 streams (issue #43)
TOPICS = ("a lighthouse keeper", "a mountain village", "an old clockmaker", "a river journey")


def body(i: int, wave: int, tokens: int, eos: list[int]) -> dict:
    text = f"Request {wave}-{i}. Tell me a long story about {TOPICS[i % len(TOPICS)]}."
    return {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "temperature": 0,
        "logit_bias": {str(t): -100 for t in eos},
    }


def adapter_of(i: int, names: list[str]) -> str:
    return names[i % len(names)]


async def engine_wave(engine, refs: dict, system: str, streams: int, tokens: int, wave: int, eos) -> dict:
    from bench.structured import prepare

    names = sorted(refs)
    prepared = await asyncio.gather(*(prepare(engine, body(i, wave, tokens, eos)) for i in range(streams)))
    adapters = [refs[adapter_of(i, names)] if system == "adapters" else None for i in range(streams)]

    async def one(p, ref):
        prompt, params, _ = p
        n = 0
        async for chunk in engine.generate(prompt, params, adapter=ref):
            if chunk.usage is not None:
                n = chunk.usage.completion_tokens
        return n

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one(p, ref) for p, ref in zip(prepared, adapters)))
    wall = time.perf_counter() - t0
    return {"tokens_per_s": sum(counts) / wall, "tokens": sum(counts), "wall_s": wall}


async def peer_wave(http, url: str, system: str, adapters: dict, streams: int, tokens: int, wave: int, eos) -> dict:
    from bench.llm import stream_chat
    from bench.structured import streamed

    names = sorted(adapters)
    bodies = []
    for i in range(streams):
        b = streamed(body(i, wave, tokens, eos))
        if system.endswith("adapters"):
            b["adapters"] = str(adapters[adapter_of(i, names)])
        bodies.append(b)
    t0 = time.perf_counter()
    timings = await asyncio.gather(*(stream_chat(http, url, b) for b in bodies))
    wall = max(t.end for t in timings) - t0
    total = sum(t.tokens for t in timings)
    return {"tokens_per_s": total / wall, "tokens": total, "wall_s": wall}


async def start_engine(model_dir: Path, adapters: dict):
    """The engine with the shipped LLM settings (its prompt cache off) and the adapters loaded."""
    from deployments.llm.adapter_files import load_layout
    from deployments.llm.config import LLMSlotConfig
    from deployments.llm.engine import LLMEngine

    config = LLMSlotConfig().engine_config()
    config.prefix_cache_entries = 0
    engine = await LLMEngine.start("smollm2", model_dir, config)
    refs = {}
    for name, directory in adapters.items():
        layout = load_layout(name, str(directory), None, engine.linear_layers, "smollm2", 64)
        refs[name] = await engine.add_adapter(layout)
    return engine, refs


async def measure(cache_dir: Path, streams: list[int], tokens: int, repeats: int, work: Path, progress, peer: bool):
    """Every system's waves, interleaved: each repeat runs one wave of each in turn, so a busy
    spell of the shared machine hits them all."""
    import httpx

    from bench.llm import stream_chat
    from bench.peers import mlx_lm_server
    from bench.structured import streamed
    from deployments.llm.example_adapters import ensure_example_adapters
    from deployments.llm.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2(cache_dir)
    adapters = await asyncio.to_thread(ensure_example_adapters, cache_dir, model_dir)
    engine, refs = await start_engine(model_dir, adapters)
    eos = sorted(engine.tokenizer.eos_token_ids)
    http = httpx.AsyncClient(timeout=httpx.Timeout(1800), limits=httpx.Limits(max_connections=64))
    server = mlx_lm_server(model_dir, tokens, work / "mlx_lm_server.log") if peer else None
    runs: dict = {}
    try:
        for system in ENGINE_SYSTEMS:  # first shapes, first allocations
            await engine_wave(engine, refs, system, 4, 4, -1, eos)
        if server is not None:
            await server.wait_ready()
            url = f"{server.url}/v1/chat/completions"
            await stream_chat(http, url, streamed(body(0, -1, 4, eos)))
        for n in streams:
            for r in range(repeats):
                for system in ENGINE_SYSTEMS + (PEER_SYSTEMS if server is not None else ()):
                    if system in ENGINE_SYSTEMS:
                        m = await engine_wave(engine, refs, system, n, tokens, r, eos)
                    else:
                        m = await peer_wave(http, url, system, adapters, n, tokens, r, eos)
                    runs.setdefault(str(n), {}).setdefault(system, []).append(m)
                    progress(f"lora: {system} {n} streams: {m['tokens_per_s']:.1f} tok/s")
    finally:
        engine.shutdown()
        if server is not None:
            server.stop()
        await http.aclose()
    levels = {}
    for n, by_system in runs.items():
        level = {s: _median(ms) for s, ms in by_system.items()}
        level["adapters_vs_base"] = ratio(level["adapters"]["tokens_per_s"], level["base"]["tokens_per_s"])
        if "mlx_lm_server_adapters" in level:
            level["adapters_vs_mlx_lm_server"] = ratio(
                level["adapters"]["tokens_per_s"], level["mlx_lm_server_adapters"]["tokens_per_s"]
            )
        levels[n] = level
    return {"model": model_dir.name, "adapters": sorted(adapters), "tokens": tokens, "goal": GOAL, "levels": levels}


def _median(runs: list[dict]) -> dict:
    return {k: median(r[k] for r in runs) for k in runs[0]}


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    smoke = opts.preset == "smoke"
    streams = [4] if smoke else [16]
    tokens = 8 if smoke else 64 if opts.preset == "full" else 32
    repeats = 1 if smoke else 2
    return await measure(cache_dir, streams, tokens, repeats, work, progress, peer=not smoke)


def render(result: dict) -> str:
    rows = []
    for n, level in result["levels"].items():
        for system in ENGINE_SYSTEMS + PEER_SYSTEMS:
            m = level.get(system)
            if m is None:
                continue
            vs = {"adapters": level.get("adapters_vs_base")}.get(system)
            rows.append([n, system, m["tokens_per_s"], m["wall_s"], vs])
    text = table(["streams", "system", "tok/s", "wave s", "vs the base alone"], rows)
    for n, level in result["levels"].items():
        if level.get("adapters_vs_mlx_lm_server") is not None:
            text += (
                f"\n\n{n} streams over {len(result['adapters'])} adapters: {level['adapters_vs_base']:.2f}x the base "
                f"alone (goal {result['goal']}x), {level['adapters_vs_mlx_lm_server']:.1f}x mlx_lm.server on the same mix."
            )
    return text


def plot(result: dict, path: Path) -> Optional[Path]:
    from bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return None
    systems = ENGINE_SYSTEMS + PEER_SYSTEMS
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for n, level in result["levels"].items():
        values = [(level.get(s) or {}).get("tokens_per_s") or 0 for s in systems]
        ax.bar(range(len(systems)), values, color=["#4c72b0", "#55a868", "#c44e52", "#dd8452"])
        ax.set_xticks(range(len(systems)), [s.replace("_", " ") for s in systems], fontsize=8)
        ax.set_title(f"SmolLM2-135M, {n} streams, 4 LoRA adapters vs the base")
    ax.set_ylabel("tokens/s")
    return saved(plt, fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.lora", description=__doc__)
    p.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[16])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--no-peer", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)

    def run_it(progress, work):
        return measure(opts.cache_dir, opts.streams, opts.tokens, opts.repeats, work, progress, not opts.no_peer)

    return run_alone(sys.modules[__name__], "lora", run_it, opts.out, argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
