"""What constrained decoding costs, and what it buys: the same chat requests with a JSON schema
and without, at 1 and 16 streams, on the float32 benchmark model and on SmolLM2, through the
graph's engine and through mlx_lm.server; the grammar engine's mask time per token; and how many
answers are valid against the schema.

`python -m bench.structured [--tokens 32] [--concurrency 1,16] [--repeats 1] [--smoke]`, or
`python -m bench --scenarios structured` (no Serve needed).

- The graph's engine runs in this process, as a replica runs it (LLMEngine and the grammar
  module, deployments/llm/constraints.py), so its schema / plain ratio is the grammar's cost
  alone; over HTTP the same serving overhead per token adds to both.
- mlx_lm.server (bench/peers.py) runs as a subprocess on the same model directory and gets the
  same requests over HTTP (streamed on loopback, as bench/llm.py sends them), at the same
  concurrency, its waves rotating with the engine's. It has no constrained decoding: it ignores
  `response_format` (and `ignore_eos`), so the schema requests are plain ones to it. Its tok/s
  counts the tokens its usage reports (it may stop at an end-of-sequence token before
  `max_tokens`: its tokens per request say so) and includes HTTP and its server loop, so set its
  two columns against each other and its answers' validity against the engine's; scenario 1
  (bench/llm.py) compares the two servers' tok/s over HTTP.

Throughput: every request is greedy and asks for `tokens` tokens: the plain ones carry
`ignore_eos`, the constrained ones a schema (an array of records with `minItems` = `tokens`) that
cannot be complete sooner, so the engine does the same work either way; its token counts are
checked. Every request turns the chat template's thinking off (`NO_THINKING`): a thinking block
is free text, which no schema constrains. Waves alternate, their order rotating each repeat.

Validity: those answers are cut at `max_tokens` by design, so what an answer is worth is measured
on a second set of requests, once per model, as many at once as the highest concurrency: the same
kind of prompt and record, with a schema whose longest answer fits in `ANSWER_TOKENS` (one or two
records, bounded names), so a complete answer is always possible. An answer is valid when the
whole of it parses (`json.loads`, as the openai SDK's `.parse()` reads it) and validates against
the schema (jsonschema).

Check-and-retry: the same validity requests with each record's tags `uniqueItems`, a keyword the
grammar leaves to the check of the finished answer, beside the same without, through the
ingress's check (deployments/ingress/serving/structured.py) over the engine in process: answers
valid and not met, attempts, tokens generated (all attempts) and wall time per answer, the cost of
the keyword the grammar cannot enforce.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Optional

from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.report import pyplot, run_alone, saved, table
from bench.stats import ratio

ROOT = Path(__file__).resolve().parents[1]
MODES = ("plain", "schema")
SYSTEMS = ("engine", "peer")  # the graph's engine in process; mlx_lm.server over HTTP
# Room for the longest answer answer_schema() allows, written as the grammar writes JSON (no free
# whitespace, deployments/llm/constraints.py JSON_STYLE), one token at least per character
# (tests/unit/bench/test_structured.py checks the bound).
ANSWER_TOKENS = 200


def _record(name: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "name": name,
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
            "active": {"type": "boolean"},
        },
        "required": ["name", "age", "tags", "active"],
        "additionalProperties": False,
    }


def _people(record: dict, **bounds) -> dict:
    return {
        "type": "object",
        "properties": {"people": {"type": "array", "items": record, **bounds}},
        "required": ["people"],
        "additionalProperties": False,
    }


def schema(records: int) -> dict:
    """Records with every kind of value a schema constrains (keys, a string, a ranged integer,
    enums, a boolean); at least `records` of them, each several tokens long. (A `maxLength`
    costs more: each length reached is a lexer state llguidance builds on first use.)"""
    return _people(_record({"type": "string"}), minItems=records)


def answer_schema(unique_tags: bool = False) -> dict:
    """The validity requests' schema: the same records, one or two, each name at most ten letters
    (a pattern, not `maxLength`: a string's escapes would make its length in tokens unbounded),
    so every answer the schema allows fits in ANSWER_TOKENS. `unique_tags`: each record's tags
    `uniqueItems`, which the grammar leaves to the check of the finished answer (the
    check-and-retry case)."""
    record = _record({"type": "string", "pattern": "^[A-Za-z ]{1,10}$"})
    if unique_tags:
        record["properties"]["tags"]["uniqueItems"] = True
    return _people(record, minItems=1, maxItems=2)


def _tag(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()[:8]  # distinct prompts: no prefix-cache hits


# The benchmark model speaks Qwen3's chat template (bench/model.py), whose answers may open with a
# thinking block; a constrained answer leaves that block free text (deployments/llm/constraints.py),
# so a random model could spend a request's tokens thinking, unconstrained. Thinking off (the
# template's own switch, which mlx_lm.server passes on too; SmolLM2's template has none and
# ignores it): the schema constrains every token.
NO_THINKING = {"enable_thinking": False}


def request_body(mode: str, wave: int, i: int, tokens: int) -> dict:
    body = {
        "messages": [{"role": "user", "content": f"{_tag(f'{wave}/{i}')} list the people of the village as JSON."}],
        "max_tokens": tokens,
        "temperature": 0,
        "chat_template_kwargs": NO_THINKING,
    }
    if mode == "plain":
        body["ignore_eos"] = True
    else:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "village", "schema": schema(tokens)}}
    return body


def answer_body(i: int, unique_tags: bool = False) -> dict:
    """A validity request: an answer the schema allows always fits in its max_tokens."""
    schema_ = answer_schema(unique_tags)
    return {
        "messages": [
            {"role": "user", "content": f"{_tag(f'answer/{i}')} list one or two people of the village as JSON."}
        ],
        "max_tokens": ANSWER_TOKENS,
        "temperature": 0,
        "chat_template_kwargs": NO_THINKING,
        "response_format": {"type": "json_schema", "json_schema": {"name": "village", "schema": schema_}},
    }


def streamed(body: dict) -> dict:
    """The request as sent over HTTP: streamed, usage in the last chunk (bench/llm.py)."""
    return {**body, "stream": True, "stream_options": {"include_usage": True}}


def judge(text: str, answer: dict) -> str:
    """ "valid", "invalid" (JSON the schema does not allow) or "not JSON": the whole answer, as a
    client's `json.loads` reads it (a JSON object inside a Markdown fence is not JSON)."""
    import jsonschema

    try:
        value = json.loads(text)
    except ValueError:
        return "not JSON"
    return "valid" if jsonschema.Draft202012Validator(answer).is_valid(value) else "invalid"


def tally(answers: list[str], answer: dict) -> dict:
    verdicts = [judge(text, answer) for text in answers]
    return {
        "answers": len(verdicts),
        "json": sum(v != "not JSON" for v in verdicts),
        "valid": sum(v == "valid" for v in verdicts),
    }


# ---------------------------------------------------------------------------------------------
# The graph's engine, in process


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
    return prompt, params, await engine.guide(constraint, prompt, request.choice_count())


async def generate(engine, prepared) -> tuple[int, str]:
    """The answer's token count (its usage) and its text."""
    prompt, params, guided = prepared
    tokens, text = None, []
    async for chunk in engine.generate(prompt, params, None, guided=guided):
        text.append(chunk.content or "")
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return tokens, "".join(text)


async def one(engine, body: dict) -> tuple[int, str]:
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
    counts = [n for n, _ in await asyncio.gather(*(generate(engine, p) for p in prepared))]
    wall = time.perf_counter() - t0
    if any(c != tokens for c in counts):
        raise RuntimeError(f"unequal work ({mode}): asked for {tokens} tokens, got {counts}")
    masked = engine.stats["constrained_tokens"] - before["constrained_tokens"]
    out = {"tokens_per_s": sum(counts) / wall, "wall_s": wall, "prepare_ms_per_request": prepare_s / streams * 1000}
    if masked:
        out["mask_us_per_token"] = (engine.stats["mask_seconds"] - before["mask_seconds"]) / masked * 1e6
        out["mask_cpu_us_per_token"] = (engine.stats["mask_cpu_seconds"] - before["mask_cpu_seconds"]) / masked * 1e6
    return out


async def engine_answers(engine, n: int) -> list[str]:
    prepared = await asyncio.gather(*(prepare(engine, answer_body(i)) for i in range(n)))
    return [text for _, text in await asyncio.gather(*(generate(engine, p) for p in prepared))]


# ---------------------------------------------------------------------------------------------
# Check-and-retry: the validity requests with each record's tags `uniqueItems` (left to the check
# of the finished answer, resampled when it fails) beside the same without (the grammar is the
# whole schema), through the ingress's own check (deployments/ingress/serving/structured.py) over
# the engine in this process.

CHECK_VARIANTS = ("grammar", "check")


class EngineStream:
    """The engine's generation of one request as the ingress holds a slot's stream (`first`, its
    first chunk awaited; `chunks()`)."""

    def __init__(self, chunks, first):
        self._chunks, self.first = chunks, first

    @classmethod
    async def open(cls, engine, body: dict) -> EngineStream:
        prompt, params, guided = await prepare(engine, body)
        n = body.get("n") or 1
        chunks = engine.generate(prompt, params, None, n, None, guided)
        return cls(chunks, await chunks.__anext__())

    async def chunks(self):
        yield self.first
        async for chunk in self._chunks:
            yield chunk


async def checked_answer(engine, body: dict) -> dict:
    """One request through the check: its outcome, attempts, tokens generated, wall time."""
    from deployments.ingress.serving.structured import CheckedStream
    from deployments.llm.answer_check import AnswerCheck, retry_fields
    from deployments.llm.config import LLMSlotConfig
    from deployments.protocol.openai import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate(body)
    results: list[str] = []

    async def open_attempt(choices: int, attempt: int) -> EngineStream:
        return await EngineStream.open(engine, {**body, **retry_fields(request, attempt, choices)})

    t0 = time.perf_counter()
    checked = CheckedStream(
        await EngineStream.open(engine, body),
        AnswerCheck.of(request),
        open_attempt,
        LLMSlotConfig().schema_attempts,
        streamed=False,
        record=results.append,
    )
    finish, tokens = None, 0
    async for chunk in checked.chunks():
        finish = chunk.finish_reason or finish
        tokens = chunk.usage.completion_tokens if chunk.usage else tokens
    return {"finish": finish, "attempts": len(results), "tokens": tokens, "seconds": time.perf_counter() - t0}


async def checked_answers(engine, n: int, unique_tags: bool) -> dict:
    """`n` validity requests at once, through the check."""
    t0 = time.perf_counter()
    answers = await asyncio.gather(*(checked_answer(engine, answer_body(i, unique_tags)) for i in range(n)))
    return {
        "answers": n,
        "valid": sum(a["finish"] == "stop" for a in answers),
        "not_met": sum(a["finish"] == "schema_not_met" for a in answers),
        "attempts_per_answer": sum(a["attempts"] for a in answers) / n,
        "tokens_per_answer": sum(a["tokens"] for a in answers) / n,
        "seconds_per_answer": sum(a["seconds"] for a in answers) / n,
        "wall_s": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------------------
# mlx_lm.server, over HTTP


async def peer_wave(http, url: str, mode: str, streams: int, tokens: int, wave_id: int) -> dict:
    """The engine's wave's requests, all sent at once; tok/s from the tokens its usage reports."""
    from bench.llm import stream_chat

    bodies = [streamed(request_body(mode, wave_id, i, tokens)) for i in range(streams)]
    t0 = time.perf_counter()
    timings = await asyncio.gather(*(stream_chat(http, url, body) for body in bodies))
    wall = max(t.end for t in timings) - t0
    counts = [t.tokens for t in timings]
    return {"tokens_per_s": sum(counts) / wall, "wall_s": wall, "tokens_per_request": sum(counts) / len(counts)}


async def peer_answers(http, url: str, n: int) -> list[str]:
    from bench.llm import stream_chat

    timings = await asyncio.gather(
        *(stream_chat(http, url, streamed(answer_body(i)), keep_text=True) for i in range(n))
    )
    return [t.text for t in timings]


async def start_peer(model_dir: Path, tokens: int, streams: int, work: Path, http):
    """mlx_lm.server on the model, warmed up (load, first allocations) with as many connections
    open as the largest wave uses (its listen backlog is 5: bench/llm.py)."""
    from bench.llm import stream_chat
    from bench.peers import mlx_lm_server

    server = mlx_lm_server(model_dir, max(tokens, ANSWER_TOKENS), work / f"mlx_lm_server-{model_dir.name}.log")
    try:
        await server.wait_ready()
        url = f"{server.url}/v1/chat/completions"
        await asyncio.gather(*(stream_chat(http, url, streamed(request_body("plain", -1, i, 4))) for i in range(2)))
        await asyncio.gather(
            *(stream_chat(http, url, streamed(request_body("plain", -2, i, 1))) for i in range(streams))
        )
    except BaseException:
        server.stop()
        raise
    return server, url


# ---------------------------------------------------------------------------------------------


async def measure_model(
    name: str, model_dir: Path, concurrency, tokens: int, repeats: int, work: Path, progress, peer: bool = True
) -> dict:
    import httpx

    from deployments.llm.config import LLMSlotConfig
    from deployments.llm.engine import LLMEngine

    engine = await LLMEngine.start(name, model_dir, LLMSlotConfig().engine_config())
    http = httpx.AsyncClient(timeout=httpx.Timeout(600), limits=httpx.Limits(max_connections=256))
    server = None
    try:
        await one(engine, request_body("schema", -1, 0, 4))  # warm-up: the grammar engine's token trie
        await one(engine, request_body("plain", -1, 1, 4))
        systems = SYSTEMS if peer else SYSTEMS[:1]
        if peer:
            server, url = await start_peer(model_dir, tokens, max(concurrency), work, http)
            progress(f"structured: {name}: mlx_lm.server is up")
        runs: dict = {s: {c: {m: [] for m in MODES} for c in concurrency} for s in systems}
        waves = [(s, m) for s in systems for m in MODES]
        wave_id = 0
        for rep in range(repeats):
            for c in concurrency:
                ids = {m: wave_id + k + 1 for k, m in enumerate(MODES)}  # both systems: the same requests
                wave_id += len(MODES)
                for system, mode in waves[rep % len(waves) :] + waves[: rep % len(waves)]:
                    if system == "engine":
                        m = await wave(engine, mode, c, tokens, ids[mode])
                    else:
                        m = await peer_wave(http, url, mode, c, tokens, ids[mode])
                    runs[system][c][mode].append(m)
                    progress(f"structured: {name} {c} streams, {system} {mode}: {m['tokens_per_s']:.1f} tok/s")
        n = max(concurrency)
        answers = {"engine": await engine_answers(engine, n)}
        checks = {variant: await checked_answers(engine, n, variant == "check") for variant in CHECK_VARIANTS}
        progress(f"structured: {name} check-and-retry: {checks}")
        if peer:
            answers["peer"] = await peer_answers(http, url, n)
    finally:
        await http.aclose()
        if server is not None:
            server.stop()
        engine.shutdown()
    validity = {"max_tokens": ANSWER_TOKENS, **{s: tally(texts, answer_schema()) for s, texts in answers.items()}}
    if peer:
        validity["peer_example"] = answers["peer"][0][:300]
    progress(f"structured: {name} valid answers: " + ", ".join(f"{s} {validity[s]['valid']}/{n}" for s in answers))
    levels = {}
    for c in concurrency:
        level = _levels(runs["engine"][c])
        level["schema_vs_plain"] = ratio(level["schema"]["tokens_per_s"], level["plain"]["tokens_per_s"])
        if peer:
            level["peer"] = _levels(runs["peer"][c])
        levels[str(c)] = level
    return {"dir_name": model_dir.name, "levels": levels, "validity": validity, "checks": checks}


def _levels(by_mode: dict) -> dict:
    return {**{mode: _median(ms) for mode, ms in by_mode.items()}, "repeats": by_mode}


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


async def measure(
    cache_dir: Path, concurrency, tokens: int, repeats: int, smoke: bool, work: Path, progress, peer: bool = True
) -> dict:
    from deployments import blas

    blas.select()
    results = {}
    for name, model_dir in models(cache_dir, smoke).items():
        results[name] = await measure_model(name, model_dir, concurrency, tokens, repeats, work, progress, peer)
    return {"tokens_per_request": tokens, "concurrency": list(concurrency), "repeats": repeats, "models": results}


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    """`python -m bench --scenarios structured`: no Serve needed, the engine runs in this process
    and mlx_lm.server beside it."""
    return await measure(cache_dir, opts.concurrency, opts.tokens, opts.repeats, opts.smoke, work, progress)


def _fraction(validity: dict, system: str, key: str) -> Optional[str]:
    counts = validity.get(system)
    return None if counts is None else f"{counts[key]}/{counts['answers']}"


def render(result: dict) -> str:
    rows = []
    for name, m in result["models"].items():
        for c, level in m["levels"].items():
            plain, constrained = level["plain"], level["schema"]
            peer = level.get("peer") or {}
            peer_plain, peer_schema = peer.get("plain") or {}, peer.get("schema") or {}
            per_request = [p.get("tokens_per_request") for p in (peer_plain, peer_schema)]
            rows.append(
                [
                    name,
                    c,
                    plain["tokens_per_s"],
                    constrained["tokens_per_s"],
                    level["schema_vs_plain"],
                    peer_plain.get("tokens_per_s"),
                    peer_schema.get("tokens_per_s"),
                    None if None in per_request else " / ".join(f"{t:.0f}" for t in per_request),
                    constrained.get("mask_us_per_token"),
                    constrained.get("mask_cpu_us_per_token"),
                    constrained["prepare_ms_per_request"] - plain["prepare_ms_per_request"],
                ]
            )
    out = table(
        [
            "model",
            "streams",
            "engine plain tok/s",
            "engine JSON schema tok/s",
            "engine schema / plain",
            "mlx_lm.server plain tok/s",
            "mlx_lm.server JSON schema tok/s (ignored)",
            "mlx_lm.server tokens/request (plain / schema)",
            "mask µs/token (wall)",
            "mask µs/token (CPU)",
            "schema compile ms/request",
        ],
        rows,
    )
    notes = [
        f"Engine: the graph's LLM engine in process (what a replica runs, no HTTP), greedy, "
        f"{result['tokens_per_request']} tokens per request, all of a wave admitted at once. "
        "mlx_lm.server: the same requests over HTTP (streamed, loopback) at the same concurrency; it "
        "has no constrained decoding and ignores `response_format` and `ignore_eos`, so its schema "
        "requests are plain ones to it and its tok/s counts the tokens it reports (fewer than asked "
        "where it stopped at an end-of-sequence token). Its figures include HTTP, the engine's do not: "
        "compare each system's two columns, not the systems' tok/s (scenario 1 does that over HTTP). "
        f"Median of {result['repeats']} repeat(s). Mask: consuming the sampled token and computing the "
        "next mask, per sequence and token (wall, and the grammar engine's own CPU time); compile: "
        "checking and compiling the schema, per request, before it joins the batch."
    ]
    validity_rows = [
        [
            name,
            _fraction(m["validity"], "engine", "valid"),
            _fraction(m["validity"], "peer", "json"),
            _fraction(m["validity"], "peer", "valid"),
        ]
        for name, m in result["models"].items()
        if m.get("validity")
    ]
    if validity_rows:
        max_tokens = next(m["validity"]["max_tokens"] for m in result["models"].values() if m.get("validity"))
        out += "\n\n" + table(
            [
                "model",
                "engine (constrained): valid answers",
                "mlx_lm.server (no constrained decoding): answers that parse as JSON",
                "mlx_lm.server: valid answers",
            ],
            validity_rows,
        )
        notes.append(
            "Valid answers: requests sent all at once to each system with a `json_schema` (one or two "
            f"records) whose every answer fits in their max_tokens ({max_tokens}); an answer is valid "
            "when the whole of it parses (`json.loads`, as the openai SDK's `.parse()` reads it; JSON "
            "inside a Markdown fence does not) and validates against the schema (jsonschema)."
        )
    check_rows = [
        [
            name,
            "with `uniqueItems` (checked)" if variant == "check" else "without (the grammar is the schema)",
            f"{c['valid']}/{c['answers']}",
            c["not_met"],
            c["attempts_per_answer"],
            c["tokens_per_answer"],
            c["wall_s"],
            ratio(c["tokens_per_answer"], m["checks"]["grammar"]["tokens_per_answer"]),
            ratio(c["wall_s"], m["checks"]["grammar"]["wall_s"]),
        ]
        for name, m in result["models"].items()
        if m.get("checks")
        for variant, c in m["checks"].items()
    ]
    if check_rows:
        out += "\n\n" + table(
            [
                "model",
                "tags",
                "valid answers",
                "not met",
                "attempts/answer",
                "tokens/answer (all attempts)",
                "wall s (all at once)",
                "tokens vs without",
                "wall vs without",
            ],
            check_rows,
        )
        notes.append(
            "Check-and-retry: the validity requests again, each through the ingress's check of the finished answer "
            "(deployments/ingress/serving/structured.py) over the engine in process, once with each record's tags "
            "`uniqueItems` (a keyword llguidance leaves to the check: an answer with a tag twice is resampled, "
            "greedy's retries at temperature 0.7, up to llm.schema_attempts attempts) and once without. Tokens: "
            "every attempt's, as usage counts them; not met: every attempt failed, nothing returned."
        )
    return out + "\n\n" + "\n\n".join(notes)


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.8))
    labels = []
    bars: dict = {
        ("engine", "plain"): [],
        ("engine", "schema"): [],
        ("peer", "plain"): [],
        ("peer", "schema"): [],
    }
    for name, m in result["models"].items():
        for c, level in m["levels"].items():
            labels.append(f"{name.split(' ')[0]}\n{c} streams")
            for (system, mode), values in bars.items():
                source = level if system == "engine" else level.get("peer") or {}
                values.append((source.get(mode) or {}).get("tokens_per_s") or 0)
    legend = {
        ("engine", "plain"): "engine, plain (in process)",
        ("engine", "schema"): "engine, JSON schema (in process)",
        ("peer", "plain"): "mlx_lm.server, plain (HTTP)",
        ("peer", "schema"): "mlx_lm.server, JSON schema ignored (HTTP)",
    }
    x = range(len(labels))
    width = 0.2
    for k, (key, values) in enumerate(bars.items()):
        if any(values):
            ax.bar(
                [i + (k - 1.5) * width for i in x],
                values,
                width,
                label=legend[key],
                hatch="//" if key[0] == "peer" else None,
            )
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_ylabel("tokens/s")
    ax.legend(fontsize=7)
    return saved(plt, fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.structured", description=__doc__)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16])
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="the smoke-size benchmark model only")
    p.add_argument("--no-peer", action="store_true", help="the engine only, without mlx_lm.server")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)

    def run_it(progress, work):
        return measure(
            opts.cache_dir, opts.concurrency, opts.tokens, opts.repeats, opts.smoke, work, progress, not opts.no_peer
        )

    return run_alone(sys.modules[__name__], "structured", run_it, opts.out, argv, "smoke" if opts.smoke else "custom")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
