"""What the prompt cache's disk tier writes, by workload: the LLM engine in process, as a replica
runs it (the shipped LLM settings: a 10-entry RAM tier, a disk tier taking prefixes of 256
tokens or more), each workload on a fresh disk tier, greedy:

- `one_off`: a burst of requests, each with its own large JSON schema in its system prompt, as
  structured-output clients send them; nothing is shared, nothing is read back (the burst that
  wrote 0.99 GB for 0 hits while every long prompt was written through);
- `shared_system`: as many requests on one large system prompt, each its own question;
- `conversations`: conversations of three turns (the history and answers resent).

For each: the entries and bytes written, the disk tier's admissions by reason
(deployments/llm/admission.py), and the workload's wall time. Then, for `shared_system` and
`conversations`, a fresh engine on the same disk (a restarted replica) asks one more question /
turn, and the tokens it loads from disk are reported: what the writes were for.

    .venv/bin/python -m bench.disk_admission [--requests 128] [--model smollm2|tiny] [--workloads one_off,...]

Run from a checkout of an older commit it measures that commit's policy (figures it does not
report are left out): docs/performance.md has both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAVE = 16  # requests admitted together, as a burst reaches a replica


def schema(i: int, fields: int = 24) -> dict:
    """A JSON schema of its own for request `i`: ~25 tokens a field with SmolLM2's tokenizer."""
    props = {
        f"r{i}_field_{j}": {
            "type": ["string", "integer", "number", "boolean"][j % 4],
            "description": f"The {j}th attribute of record kind {i}, as the catalogue team {i % 7} defines it.",
        }
        for j in range(fields)
    }
    return {"type": "object", "properties": props, "required": list(props)}


def one_off(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "Reply with JSON matching this schema:\n" + json.dumps(schema(i))},
        {"role": "user", "content": f"Describe record {i}."},
    ]


SHARED = one_off(10_000)[0]


def shared_system(i: int) -> list[dict]:
    return [SHARED, {"role": "user", "content": f"Describe record {i} in the catalogue."}]


async def chat(engine, messages: list[dict], tokens: int) -> tuple[str, int]:
    """One greedy chat through the engine as the replica prepares it: (answer, cached tokens)."""
    from deployments.generation.sampling import SamplingParams
    from deployments.llm.prompts import chat_prompt
    from deployments.protocol.openai import ChatCompletionRequest

    request = ChatCompletionRequest(messages=messages, max_tokens=tokens, temperature=0)
    text, usage = "", None
    async for chunk in engine.generate(
        chat_prompt(engine.tokenizer, request), SamplingParams.from_request(request, tokens, {})
    ):
        text += chunk.content + chunk.reasoning_content
        usage = chunk.usage or usage
    details = getattr(usage, "prompt_tokens_details", None)
    return text, getattr(details, "cached_tokens", 0) or 0


async def burst(engine, bodies: list[list[dict]], tokens: int) -> None:
    for start in range(0, len(bodies), WAVE):
        await asyncio.gather(*(chat(engine, b, tokens) for b in bodies[start : start + WAVE]))


async def conversations(engine, n: int, tokens: int) -> list[list[dict]]:
    """`n` conversations of three turns, WAVE at a time; returns each one's messages so far."""
    histories = [one_off(20_000 + i)[:1] + [{"role": "user", "content": f"Start story {i}."}] for i in range(n)]

    async def converse(history: list[dict]) -> None:
        for turn in range(3):
            answer, _ = await chat(engine, history, tokens)
            history += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"Go on ({turn})."}]

    for start in range(0, n, WAVE):
        await asyncio.gather(*(converse(h) for h in histories[start : start + WAVE]))
    return histories


def written(disk_dir: Path) -> dict:
    from deployments.llm.disk_cache import scan

    entries = scan(disk_dir)
    return {"entries": len(entries), "bytes": sum(e.nbytes for e in entries)}


WORKLOADS = ("one_off", "shared_system", "conversations")


async def measure(model_dir: Path, requests: int, tokens: int, progress, workloads=WORKLOADS) -> dict:
    from deployments.llm.config import LLMSlotConfig
    from deployments.llm.engine import LLMEngine

    results = {}
    for workload in workloads:
        disk_dir = Path(tempfile.mkdtemp(prefix=f"ominix-admission-{workload}-"))
        config = LLMSlotConfig().engine_config(disk_cache_dir=disk_dir)
        engine = await LLMEngine.start("model", model_dir, config)
        try:
            t0 = time.perf_counter()
            if workload == "one_off":
                await burst(engine, [one_off(i) for i in range(requests)], tokens)
            elif workload == "shared_system":
                await burst(engine, [shared_system(i) for i in range(requests)], tokens)
            else:
                histories = await conversations(engine, max(1, requests // 4), tokens)
            wall = time.perf_counter() - t0
            engine.prefix_cache.disk.flush()
            disk = engine.prompt_cache_tiers().get("disk", {})
        finally:
            engine.shutdown()
        result = {"requests": requests if workload != "conversations" else 3 * max(1, requests // 4), "wall_s": wall}
        result.update(written(disk_dir))
        result["admitted"] = disk.get("admitted")
        if workload != "one_off":  # a restarted replica: what the writes give it
            engine = await LLMEngine.start("model", model_dir, config)
            try:
                later = shared_system(requests) if workload == "shared_system" else histories[0]
                _, result["restarted_replica_cached_tokens"] = await chat(engine, later, tokens)
            finally:
                engine.shutdown()
        shutil.rmtree(disk_dir, ignore_errors=True)
        results[workload] = result
        progress(f"{workload}: {result['entries']} entries, {result['bytes'] / 1e6:.1f} MB in {wall:.0f} s")
    return results


def render(result: dict) -> str:
    from bench.report import table

    rows = [
        [
            name,
            m["requests"],
            m["entries"],
            m["bytes"] / 1e6,
            ", ".join(f"{k} {v}" for k, v in (m.get("admitted") or {}).items()) or "-",
            m.get("restarted_replica_cached_tokens"),
            m["wall_s"],
        ]
        for name, m in result["workloads"].items()
    ]
    return table(
        [
            "workload",
            "requests",
            "entries written",
            "MB written",
            "admitted (by reason)",
            "restarted replica: cached tokens",
            "wall s",
        ],
        rows,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.disk_admission", description=__doc__)
    p.add_argument("--requests", type=int, default=128)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    p.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    from deployments import blas

    blas.select()  # before MLX loads, as a replica does
    if opts.model == "smollm2":
        from deployments.llm.smollm2 import ensure_smollm2

        model_dir = ensure_smollm2(opts.cache_dir)
    else:
        from deployments.llm.tiny_model import ensure_tiny_llm

        model_dir = ensure_tiny_llm(opts.cache_dir)
    from bench.report import run_standalone, save_standalone

    result = run_standalone(
        "bench.disk_admission",
        argv,
        lambda progress: {
            "model": model_dir.name,
            "workloads": asyncio.run(measure(model_dir, opts.requests, opts.tokens, progress, opts.workloads)),
        },
    )
    save_standalone(opts.out, "disk_admission", result, render(result))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
