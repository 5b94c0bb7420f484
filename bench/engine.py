"""The LLM engine's own cost per step, in process (no Ray, no HTTP), beside mlx-lm's
`BatchGenerator` driven directly on the same model.

`python -m bench --scenarios engine` or `python -m bench.engine [--streams 1,16,64] [--tokens 128]`

On the bench's smoke-size model (bench/model.py `SMOKE_CONFIG`: a 2-layer Qwen3 whose decode
step costs well under a millisecond) the model's share of a step is near zero, so what shows is
what a fast accelerator would show: the host's work per step. Systems, all greedy, every
sequence generating exactly `tokens` tokens from its own prompt:

- `engine`: deployments/llm/engine.py as the LLM replica runs it: requests streamed through the
  engine thread's bridge to asyncio consumers, detokenized, parsed, sent;
- `batch`: the engine's batch core alone (deployments/llm/batch.py), driven in a loop, no
  detokenizing: the scheduler and the decode step, on the model as the engine loads it;
- `batch_generator`: mlx-lm's BatchGenerator driven the same way, on the model as mlx-lm loads
  it (the peer, as its users run it);
- `batch_generator_norms`: the same on the model as the engine loads it (on the CPU backend its
  RMSNorms and RoPEs compiled, deployments/kernels/llm_norms.py): what of the engine's lead is
  that, and what its scheduling.

For each: tokens/s, and the host's CPU time per decode step (the driving thread's CPU time over
the run, divided by the steps; a thread blocked on the device spends none). Repeats alternate
the systems and report medians (the 2-core machine is noisy); each measured run follows a short
one (16 tokens) of the same system, so that none is measured just after another system ran on
its own copy of the weights (a run right after one was the slowest of its repeats: the peer's
after the engine's, the engine's after the peer's). Then, at 16 streams, the same with
each request held to a JSON schema (llguidance masks, deployments/llm/masks.py): how much of the
masks' CPU time lands on the step's critical path. And a cProfile of the engine thread at 16
streams, grouped by where the time goes, into bench/results/profiles/engine-<streams>.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import re
import sys
import time
from pathlib import Path
from typing import Optional

from bench.report import run_alone, saved, table
from bench.stats import median, ratio

ROOT = Path(__file__).resolve().parents[1]
NEEDS_CLUSTER = False  # in process: `python -m bench` starts no Ray for it alone
SYSTEMS = ("engine", "batch", "batch_generator", "batch_generator_norms")
PROFILE_GROUPS = [  # where a profiled frame's own time went, first match wins
    ("waiting for the device (mx.eval, tolist)", r"decode\.py.*\(step\)|generate\.py.*\(_step\)"),
    ("model graph building (mlx_lm.models, mlx.nn)", r"mlx_lm/models/|mlx/nn/"),
    (
        "batch core (batch, prefill, decode, sampler, masks)",
        r"deployments/llm/(batch|prefill|decode|sampler|masks)\.py",
    ),
    ("grammar (llguidance, constraints)", r"llguidance|constraints\.py"),
    ("detokenizer", r"tokenizer_utils|tokenizers"),
    ("output parsing (stop strings, tool calls)", r"generation/output\.py|tool_calls\.py"),
    ("engine per-token work (engine.py)", r"deployments/llm/engine\.py"),
    ("chunks (pydantic)", r"pydantic|protocol/generation\.py"),
    ("thread bridge (engine_thread, socket wake-ups)", r"engine_thread\.py|socket|call_soon_threadsafe"),
]


def prompts(tokenizer, n: int, tag: str = "") -> list[list[int]]:
    return [
        tokenizer.encode(f"{tag}Request {i}: tell me about the number {i * 7} and its neighbours.") for i in range(n)
    ]


def thread_cpu(native_id: int) -> float:
    """A thread's CPU time (user + system), from /proc: seconds."""
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# The systems


async def run_engine(engine, streams: int, tokens: int, tag: str, body=None) -> dict:
    """`body(i)`: request i as a chat request body (bench/structured.py's), prepared as the
    replica prepares it; None: plain prompts of token ids."""
    from deployments.generation.sampling import SamplingParams
    from deployments.llm.prompts import Prompt

    prepared = []
    for i, ids in enumerate(prompts(engine.tokenizer, streams, tag)):
        if body is None:
            params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
            prepared.append((Prompt(token_ids=ids), params, None))
        else:
            from bench.structured import prepare

            prepared.append(await prepare(engine, body(i)))

    async def one(prompt, params, guided) -> int:
        count = 0
        async for chunk in engine.generate(prompt, params, guided=guided):
            if chunk.usage is not None:
                count = chunk.usage.completion_tokens
        return count

    tid = engine._thread.native_id
    before, steps_before = thread_cpu(tid), engine.batch_totals().generation_steps
    masks_before = dict(engine.stats)
    t0 = time.perf_counter()
    counts = await asyncio.gather(*(one(*p) for p in prepared))
    wall = time.perf_counter() - t0
    steps = engine.batch_totals().generation_steps - steps_before
    out = per_step(sum(counts), steps, wall, thread_cpu(tid) - before)
    if engine.stats["constrained_tokens"] > masks_before["constrained_tokens"]:
        masked = engine.stats["constrained_tokens"] - masks_before["constrained_tokens"]
        out["mask_cpu_ms_per_step"] = (
            (engine.stats["mask_cpu_seconds"] - masks_before["mask_cpu_seconds"]) / steps * 1e3
        )
        out["masked_tokens"] = masked
    return out


def run_batch(model, tokenizer, streams: int, tokens: int, tag: str) -> dict:
    from deployments.llm.batch import Batch, Sequence
    from deployments.llm.sampler import RowSampler

    batch = Batch(model, capacity=max(64, streams), prefill_batch=8, prefill_step=512)
    greedy = RowSampler()
    for ids in prompts(tokenizer, streams, tag):
        batch.insert(Sequence([ids], tokens, greedy))
    return _drive(batch.next, streams, lambda responses: [r for r in responses if r.finish_reason])


def run_batch_generator(model, tokenizer, streams: int, tokens: int, tag: str) -> dict:
    from mlx_lm.generate import BatchGenerator

    batch = BatchGenerator(model, completion_batch_size=max(64, streams), prefill_batch_size=8, prefill_step_size=512)
    batch.insert(prompts(tokenizer, streams, tag), max_tokens=[tokens] * streams)
    return _drive(batch.next, streams, lambda responses: [r for r in responses if r.finish_reason])


def _drive(step, streams: int, finished) -> dict:
    cpu0, t0 = time.thread_time(), time.perf_counter()
    done = generated = steps = 0
    while done < streams:
        _, responses = step()
        if responses:
            steps += 1
        generated += len(responses)
        done += len(finished(responses))
    return per_step(generated, steps, time.perf_counter() - t0, time.thread_time() - cpu0)


def per_step(generated: int, steps: int, wall: float, cpu: float) -> dict:
    """A run's tokens, tok/s and host and wall time per decode step (bench/transformers_peer.py's too)."""
    return {
        "tokens": generated,
        "tokens_per_s": generated / wall,
        "steps": steps,
        "host_ms_per_step": cpu / max(steps, 1) * 1e3,
        "wall_ms_per_step": wall / max(steps, 1) * 1e3,
    }


# ---------------------------------------------------------------------------------------------


async def measure(
    cache_dir: Path, streams: list[int], tokens: int, repeats: int, progress, profile_dir: Optional[Path]
):
    import mlx_lm

    from bench.model import SMOKE_CONFIG, ensure_bench_model
    from deployments.kernels import llm_norms
    from deployments.llm.config import LLMSlotConfig
    from deployments.llm.engine import LLMEngine

    model_dir = ensure_bench_model(cache_dir, SMOKE_CONFIG)
    config = LLMSlotConfig().engine_config()
    config.max_batch_size, config.prefix_cache_entries = max(64, max(streams)), 0
    engine = await LLMEngine.start("bench-engine", model_dir, config)
    model, tokenizer = mlx_lm.load(str(model_dir))
    served, _ = mlx_lm.load(str(model_dir))
    llm_norms.compile_served(served, warm=False)  # as the engine loads it
    systems = {
        "batch": lambda *a: run_batch(served, *a),
        "batch_generator": lambda *a: run_batch_generator(model, *a),
        "batch_generator_norms": lambda *a: run_batch_generator(served, *a),
    }

    async def run_system(system: str, n: int, count: int, tag: str) -> dict:
        if system == "engine":
            return await run_engine(engine, n, count, tag)
        return systems[system](tokenizer, n, count, tag)

    try:
        for warm in range(2):  # first shapes, first allocations
            for system in SYSTEMS:
                await run_system(system, 4, 8, f"warm{warm} ")
        levels = {}
        for n in streams:
            runs = {s: [] for s in SYSTEMS}
            for rep in range(repeats):
                k = rep % len(SYSTEMS)
                for system in SYSTEMS[k:] + SYSTEMS[:k]:
                    await run_system(system, n, 16, f"{n}/{rep} settle ")  # its steady state (module doc)
                    runs[system].append(await run_system(system, n, tokens, f"{n}/{rep} "))
            level = {s: _median(r) for s, r in runs.items()}
            level["engine_vs_batch_generator"] = ratio(
                level["engine"]["tokens_per_s"], level["batch_generator"]["tokens_per_s"]
            )
            level["engine_vs_batch_generator_norms"] = ratio(
                level["engine"]["tokens_per_s"], level["batch_generator_norms"]["tokens_per_s"]
            )
            levels[str(n)] = level
            progress(
                f"engine: {n} streams: engine {level['engine']['tokens_per_s']:.0f} tok/s, batch "
                f"{level['batch']['tokens_per_s']:.0f}, BatchGenerator {level['batch_generator']['tokens_per_s']:.0f}"
                f" ({level['engine_vs_batch_generator']:.2f}x; on the same compiled layers "
                f"{level['engine_vs_batch_generator_norms']:.2f}x)"
            )
    finally:
        engine.shutdown()
    constrained = await measure_constrained(cache_dir, config, min(tokens, 64), repeats, progress)
    profile = await profile_engine(cache_dir, config, 16, tokens, profile_dir) if profile_dir else None
    return {"model": model_dir.name, "tokens": tokens, "levels": levels, "constrained": constrained, "profile": profile}


async def measure_constrained(cache_dir: Path, config, tokens: int, repeats: int, progress, streams: int = 16) -> dict:
    """Free vs JSON-schema-constrained at `streams`, on the bench's 124M model (a forward long
    enough to hide a mask behind, as on a GPU with a real model): the step's wall time, and the
    masks' CPU time per step. With the masks off the critical path, the step grows by less than
    their time."""
    from bench.model import ensure_bench_model
    from bench.structured import request_body
    from deployments.llm.engine import LLMEngine

    engine = await LLMEngine.start("bench-constrained", ensure_bench_model(cache_dir), config)
    try:
        await run_engine(engine, 2, 4, "", body=lambda i: request_body("schema", -1, i, 4))  # the grammar's token trie
        return await _constrained(engine, tokens, repeats, progress, streams)
    finally:
        engine.shutdown()


async def _constrained(engine, tokens: int, repeats: int, progress, streams: int) -> dict:
    from bench.structured import request_body

    runs = {"free": [], "schema": []}
    for rep in range(repeats):
        free = await run_engine(
            engine, streams, tokens, "", body=lambda i, rep=rep: request_body("plain", 1000 + rep, i, tokens)
        )
        schema = await run_engine(
            engine, streams, tokens, "", body=lambda i, rep=rep: request_body("schema", 1000 + rep, i, tokens)
        )
        runs["free"].append(free)
        runs["schema"].append(schema)
    free, schema = _median(runs["free"]), _median(runs["schema"])
    added = schema["wall_ms_per_step"] - free["wall_ms_per_step"]
    out = {
        "streams": streams,
        "free": free,
        "schema": schema,
        "schema_vs_free": ratio(schema["tokens_per_s"], free["tokens_per_s"]),
        "step_ms_added": added,
        "mask_cpu_ms_per_step": schema.get("mask_cpu_ms_per_step"),
        "mask_share_on_critical_path": ratio(added, schema.get("mask_cpu_ms_per_step")),
    }
    progress(
        f"engine: constrained at {streams} streams: {out['schema_vs_free']:.2f}x of free; the step grew "
        f"{added:.2f} ms for {out['mask_cpu_ms_per_step']:.2f} ms of mask CPU"
    )
    return out


async def profile_engine(cache_dir: Path, config, streams: int, tokens: int, out_dir: Path) -> dict:
    """cProfile of the engine thread over one run (a fresh engine whose loop runs under the
    profiler): the hottest functions, and the own time by group."""
    from bench.model import SMOKE_CONFIG, ensure_bench_model
    from deployments.llm.engine import LLMEngine

    profiler = cProfile.Profile()

    class ProfiledEngine(LLMEngine):
        def _loop(self, stream) -> None:
            profiler.enable()  # cProfile follows the thread that enables it: the engine's
            try:
                super()._loop(stream)
            finally:
                profiler.disable()

    engine = await ProfiledEngine.start("bench-profiled", ensure_bench_model(cache_dir, SMOKE_CONFIG), config)
    try:
        await run_engine(engine, streams, tokens, "warm ")
        profiler.clear()
        await run_engine(engine, streams, tokens, "profile ")
    finally:
        engine.shutdown()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    groups = _groups(stats)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"engine-{streams}.txt"
    lines = [f"{share * 100:5.1f} %  {name}" for name, share in groups.items()]
    path.write_text("Engine thread, own time by group:\n" + "\n".join(lines) + "\n\n" + text.getvalue())
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return {"streams": streams, "groups": groups, "file": str(shown)}


def _groups(stats: pstats.Stats) -> dict[str, float]:
    totals: dict[str, float] = {}
    everything = 0.0
    for (filename, line, name), (_, _, own, _, _) in stats.stats.items():
        label = f"{filename}:{line}({name})"
        group = next((g for g, pattern in PROFILE_GROUPS if re.search(pattern, label)), "other")
        totals[group] = totals.get(group, 0.0) + own
        everything += own
    return {g: t / everything for g, t in sorted(totals.items(), key=lambda kv: -kv[1])}


def _median(runs: list[dict]) -> dict:
    keys = {k for r in runs for k in r}
    return {k: median(r.get(k) for r in runs) for k in sorted(keys)}


# ---------------------------------------------------------------------------------------------


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    streams = [1, 2] if opts.preset == "smoke" else [1, 16, 64]
    tokens = 16 if opts.preset == "smoke" else 128
    repeats = 1 if opts.preset == "smoke" else 5
    return await measure(cache_dir, streams, tokens, repeats, progress, opts.out / "profiles")


def render(result: dict) -> str:
    rows = []
    for n, level in result["levels"].items():
        for system in (s for s in SYSTEMS if s in level):  # older results have three systems
            m = level[system]
            ratios = [level.get(f"engine_vs_{peer}") if system == "engine" else None for peer in SYSTEMS[2:]]
            rows.append([n, system, m["tokens_per_s"], m["host_ms_per_step"], m["wall_ms_per_step"], *ratios])
    out = table(
        [
            "streams",
            "system",
            "tok/s",
            "host ms/step",
            "wall ms/step",
            "engine / BatchGenerator",
            "engine / BatchGenerator on the same layers",
        ],
        rows,
    )
    c = result.get("constrained")
    if c:
        out += "\n\n" + table(
            ["streams", "free tok/s", "schema tok/s", "schema / free", "step ms added", "mask CPU ms/step"],
            [
                [
                    c["streams"],
                    c["free"]["tokens_per_s"],
                    c["schema"]["tokens_per_s"],
                    c["schema_vs_free"],
                    c["step_ms_added"],
                    c["mask_cpu_ms_per_step"],
                ]
            ],
        )
    p = result.get("profile")
    if p:
        out += "\n\n" + table(
            [f"engine thread at {p['streams']} streams: own time", "share"],
            [[g, f"{s * 100:.1f} %"] for g, s in p["groups"].items()],
        )
    return out


def plot(result: dict, path: Path) -> Optional[Path]:
    from bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    levels = list(result["levels"])
    systems = [s for s in SYSTEMS if s in result["levels"][levels[0]]]  # older results have three
    width = 0.8 / len(systems)
    for k, system in enumerate(systems):
        values = [result["levels"][n][system]["tokens_per_s"] for n in levels]
        ax.bar([i + (k - (len(systems) - 1) / 2) * width for i in range(len(levels))], values, width, label=system)
    ax.set_xticks(range(len(levels)), [f"{n} streams" for n in levels])
    ax.set_ylabel("tokens/s")
    ax.set_title("The engine's own cost: tiny model, in process")
    ax.legend(fontsize=8)
    return saved(plt, fig, path)


def arguments(module: str, doc: str, repeats: int) -> argparse.ArgumentParser:
    """The options of the engine scenario and of its GPU peer (bench/transformers_peer.py)."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc)
    p.add_argument("--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64])
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=repeats)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    return p


def main(argv=None) -> int:
    opts = arguments("bench.engine", __doc__, repeats=5).parse_args(argv)

    def run_it(progress, work):
        return measure(opts.cache_dir, opts.streams, opts.tokens, opts.repeats, progress, opts.out / "profiles")

    return run_alone(sys.modules[__name__], "engine", run_it, opts.out, argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
