"""What constrained decoding costs: the same requests with a JSON schema and without, at 1 and 16
streams, on the float32 benchmark model and on SmolLM2, with the grammar engine's mask time per
token.

`python -m bench.structured [--tokens 32] [--concurrency 1,16] [--repeats 1]`, or
`python -m bench --scenarios structured` (no Serve needed: both run in this process).

In process, through the engine a replica runs (LLMEngine and the grammar module,
deployments/llm/constraints.py), so the ratio is the grammar's cost alone; over HTTP the same
serving overhead per token adds to both. Every request is greedy, asks for exactly `tokens`
tokens and gets them: the unconstrained ones carry `ignore_eos`, the constrained ones a schema
(an array of records with `minItems` = `tokens`) that cannot be complete sooner, so both do the
same work; the token counts are checked. Waves alternate, their order rotating each repeat.
mlx_lm.server has no constrained decoding (it ignores `response_format`): there is nothing of
its to set beside the constrained column (its plain tok/s is scenario 1's).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from pathlib import Path
from typing import Optional

from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.report import pyplot, save_standalone, table
from bench.stats import ratio

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "schema")


def schema(records: int) -> dict:
    """Records with every kind of value a schema constrains (keys, a string, a ranged integer,
    enums, a boolean); at least `records` of them, each several tokens long. (A `maxLength`
    costs more: each length reached is a lexer state llguidance builds on first use.)"""
    record = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "tags", "active"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"people": {"type": "array", "items": record, "minItems": records}},
        "required": ["people"],
        "additionalProperties": False,
    }


def request_body(mode: str, wave: int, i: int, tokens: int) -> dict:
    tag = hashlib.sha1(f"{wave}/{i}".encode()).hexdigest()[:8]  # distinct prompts: no prefix-cache hits
    body = {
        "messages": [{"role": "user", "content": f"{tag} list the people of the village as JSON."}],
        "max_tokens": tokens,
        "temperature": 0,
    }
    if mode == "plain":
        body["ignore_eos"] = True
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "village", "schema": schema(tokens)}}
    return body


async def prepare(engine, body: dict):
    """What the replica does for one chat request before it joins the batch
    (deployments/llm/deployment.py): the prompt, the sampling, the schema checked and compiled."""
    from deployments.generation.sampling import SamplingParams
    from deployments.llm.constraints import checked_constraint
    from deployments.llm.prompts import chat_prompt
    from deployments.protocol.openai import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate(body)
    prompt = chat_prompt(engine.tokenizer, request)
    params = SamplingParams.from_request(request, request.max_tokens, {})
    constraint = await asyncio.to_thread(checked_constraint, request)
    return prompt, params, await engine.guide(constraint, prompt)


async def generate(engine, prepared) -> int:
    prompt, params, guided = prepared
    tokens = None
    async for chunk in engine.generate(prompt, params, None, guided=guided):
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return tokens


async def one(engine, body: dict) -> int:
    return await generate(engine, await prepare(engine, body))


async def wave(engine, mode: str, streams: int, tokens: int, wave_id: int) -> dict:
    """`streams` requests prepared (the constrained ones compiled), then all sent at once: the
    batch runs the same sequences from the same start either way; the compile time is its own
    column (in serving it delays a request's admission, not the batch)."""
    t0 = time.perf_counter()
    prepared = await asyncio.gather(*(prepare(engine, request_body(mode, wave_id, i, tokens)) for i in range(streams)))
    prepare_s = time.perf_counter() - t0
    before = dict(engine.stats)
    t0 = time.perf_counter()
    counts = await asyncio.gather(*(generate(engine, p) for p in prepared))
    wall = time.perf_counter() - t0
    if any(c != tokens for c in counts):
        raise RuntimeError(f"unequal work ({mode}): asked for {tokens} tokens, got {counts}")
    masked = engine.stats["constrained_tokens"] - before["constrained_tokens"]
    out = {"tokens_per_s": sum(counts) / wall, "wall_s": wall, "prepare_ms_per_request": prepare_s / streams * 1000}
    if masked:
        out["mask_us_per_token"] = (engine.stats["mask_seconds"] - before["mask_seconds"]) / masked * 1e6
        out["mask_cpu_us_per_token"] = (engine.stats["mask_cpu_seconds"] - before["mask_cpu_seconds"]) / masked * 1e6
    return out


async def measure_model(name: str, model_dir: Path, concurrency, tokens: int, repeats: int, progress) -> dict:
    from deployments.llm.config import LLMSlotConfig
    from deployments.llm.engine import LLMEngine

    engine = await LLMEngine.start(name, model_dir, LLMSlotConfig().engine_config())
    try:
        await one(engine, request_body("schema", -1, 0, 4))  # warm-up: the grammar engine's token trie
        await one(engine, request_body("plain", -1, 1, 4))
        runs: dict = {c: {m: [] for m in MODES} for c in concurrency}
        wave_id = 0
        for rep in range(repeats):
            for c in concurrency:
                for mode in MODES[rep % 2 :] + MODES[: rep % 2]:
                    wave_id += 1
                    m = await wave(engine, mode, c, tokens, wave_id)
                    runs[c][mode].append(m)
                    progress(f"structured: {name} {c} streams, {mode}: {m['tokens_per_s']:.1f} tok/s")
    finally:
        engine.shutdown()
    levels = {}
    for c, by_mode in runs.items():
        level = {mode: _median(ms) for mode, ms in by_mode.items()}
        level["schema_vs_plain"] = ratio(level["schema"]["tokens_per_s"], level["plain"]["tokens_per_s"])
        level["repeats"] = by_mode
        levels[str(c)] = level
    return {"dir_name": model_dir.name, "levels": levels}


def _median(measurements: list[dict]) -> dict:
    from statistics import median

    return {k: median(m[k] for m in measurements) for k in measurements[0]}


def models(cache_dir: Path, smoke: bool) -> dict[str, Path]:
    from deployments.llm.smollm2 import SMOLLM2_ID, ensure_smollm2

    bench = ensure_bench_model(cache_dir, SMOKE_CONFIG if smoke else BENCH_CONFIG)
    return (
        {"benchmark model (float32)": bench}
        if smoke
        else {"benchmark model (float32)": bench, SMOLLM2_ID: ensure_smollm2(cache_dir)}
    )


async def measure(cache_dir: Path, concurrency, tokens: int, repeats: int, smoke: bool, progress) -> dict:
    from deployments import blas

    blas.select()
    results = {}
    for name, model_dir in models(cache_dir, smoke).items():
        results[name] = await measure_model(name, model_dir, concurrency, tokens, repeats, progress)
    return {"tokens_per_request": tokens, "concurrency": list(concurrency), "repeats": repeats, "models": results}


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    """`python -m bench --scenarios structured`: no Serve needed, the engine runs in this process."""
    return await measure(cache_dir, opts.concurrency, opts.tokens, opts.repeats, opts.smoke, progress)


def render(result: dict) -> str:
    rows = []
    for name, m in result["models"].items():
        for c, level in m["levels"].items():
            plain, constrained = level["plain"], level["schema"]
            rows.append(
                [
                    name,
                    c,
                    plain["tokens_per_s"],
                    constrained["tokens_per_s"],
                    level["schema_vs_plain"],
                    constrained.get("mask_us_per_token"),
                    constrained.get("mask_cpu_us_per_token"),
                    constrained["prepare_ms_per_request"] - plain["prepare_ms_per_request"],
                ]
            )
    rows.append(["mlx_lm.server (peer)", "-", "see scenario 1", "no constrained decoding", "-", "-", "-", "-"])
    out = table(
        [
            "model",
            "streams",
            "plain tok/s",
            "JSON schema tok/s",
            "schema / plain",
            "mask µs/token (wall)",
            "mask µs/token (CPU)",
            "schema compile ms/request",
        ],
        rows,
    )
    return (
        f"{out}\n\nIn process, greedy, {result['tokens_per_request']} tokens per request, all of a wave "
        f"admitted at once, median of {result['repeats']} repeat(s). Mask: consuming the sampled token "
        "and computing the next mask, per sequence and token (wall, and the grammar engine's own CPU "
        "time); compile: checking and compiling the schema, per request, before it joins the batch."
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels, plain, constrained = [], [], []
    for name, m in result["models"].items():
        for c, level in m["levels"].items():
            labels.append(f"{name.split(' ')[0]}\n{c} streams")
            plain.append(level["plain"]["tokens_per_s"])
            constrained.append(level["schema"]["tokens_per_s"])
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], plain, 0.4, label="plain")
    ax.bar([i + 0.2 for i in x], constrained, 0.4, label="JSON schema")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.structured", description=__doc__)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="the smoke-size benchmark model only")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    import os

    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    t0 = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    result = asyncio.run(measure(opts.cache_dir, opts.concurrency, opts.tokens, opts.repeats, opts.smoke, progress))
    command = " ".join(["python -m bench.structured", *(sys.argv[1:] if argv is None else argv)])
    preset = "smoke" if opts.smoke else "custom"
    result = {
        "preset": preset,
        "command": command,
        "duration_s": time.perf_counter() - t0,
        "load_average_before": load,
        **result,
    }
    save_standalone(opts.out, "structured", result, render(result))
    plot(result, opts.out / "structured.png")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
