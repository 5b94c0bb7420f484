"""What affinity routing and the prompt cache's disk tier save: multi-turn conversations on two
LLM replicas, routed by this graph's `AffinityRouter` and by Serve's default router (power of two
choices), side by side, on two workloads:

- `pasted`: every user turn pastes a passage (a document, an earlier reply): each turn's new
  tokens are ~15 % of its prompt, so no cache can serve more than ~0.85 of it;
- `agent`: what agents and coding tools send: a long shared prefix (instructions and tool
  definitions) and short turns ("go on", a tool's one-line result) on the growing history, so
  nearly all of a later turn's prompt is what the conversation's previous turn held.

CONVERSATIONS conversations at once share the system prompt; each sends its turns one after
another (its history and answers resent as in a chat client, no `prompt_cache_key`: the router
keys them by their head). Reports, per workload and router: the share of prompt tokens the
replicas' prefix caches served (`usage.prompt_tokens_details.cached_tokens` / `prompt_tokens`)
on the later turns and on all turns, beside the most any cache could serve (the previous turn's
prompt and answer), and TTFT p50/p95 of the later turns. Every request does the same work
(greedy, ignore_eos, token counts checked); both apps have the shipped LLM settings (the prompt
cache's disk tier included, each app on its own cache dir, so a turn on the other replica may
load its prefix from disk). On request:

    .venv/bin/python -m bench --scenarios affinity
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.llm import Timing, stream_chat
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.prefix import VOCABULARY, body, system_prompt
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import median_over_repeats, percentile, ratio

SYSTEMS = {
    "affinity_router": "AffinityRouter (this graph)",
    "serve_default_router": "Serve's default router",
}
CONVERSATIONS = 16
REPLICAS = 2
# name: (system prompt words, smoke size; words pasted per user turn, smoke size; what the turn says)
WORKLOADS = {
    "pasted": ((300, 40), (60, 10), "go on with the story, using this:"),
    # ~3.5k tokens of instructions and tools (about 1.95 tokens a word with the benchmark model's
    # tokenizer): near the 4k-token prefix, with room for four turns in the model's
    # 4096-token context. Before the CPU prefill fixes (deployments/kernels/llm_attention.py, the
    # 512-token step) the round's 16 cold first turns at 1200 words already waited past the chat
    # route's 300 s timeout on this 2-core machine.
    "agent": ((1800, 40), (0, 0), "done, the tool said ok; next step."),
}


def _router_options(name: str) -> dict:
    from ray.serve.config import RequestRouterConfig

    # The affinity app keeps the LLM deployment's own router (the one serve_config.yaml names).
    return {} if name == "affinity_router" else {"request_router_config": RequestRouterConfig()}


def passage(conv: int, turn: int, words: int) -> str:
    """What a user pastes into a turn (a document, an earlier reply): the history that grows."""
    rng = random.Random(conv * 1000 + turn)
    return " ".join(rng.choice(VOCABULARY) for _ in range(words))


async def conversation(
    call, system: str, conv: int, turns: int, tokens: int, words: int, says: str = WORKLOADS["pasted"][2]
) -> list[Timing]:
    messages = [{"role": "system", "content": system}]
    out = []
    for turn in range(turns):
        text = f"Conversation {conv}, turn {turn}: {says} {passage(conv, turn, words)}".rstrip()
        messages.append({"role": "user", "content": text})
        t = await call(body(messages, tokens))
        if t.tokens != tokens:
            raise RuntimeError(f"unequal work: asked for {tokens} tokens, got {t.tokens}")
        messages.append({"role": "assistant", "content": t.text})
        out.append(t)
    return out


def summarize(conversations: list[list[Timing]]) -> dict:
    later = [t for c in conversations for t in c[1:]]
    every = [t for c in conversations for t in c]

    def share(timings: list[Timing]) -> Optional[float]:
        prompt = sum(t.prompt_tokens or 0 for t in timings)
        return sum(t.cached_tokens or 0 for t in timings) / prompt if prompt else None

    # The most any cache could serve of a later turn: what the conversation's previous turn
    # held (its prompt and its answer). The new user message is never cached, so a cached share
    # of 1.0 is out of reach; this ceiling is what the cached share compares with.
    later_prompt = sum(t.prompt_tokens or 0 for t in later)
    cacheable = sum(
        min((prev.prompt_tokens or 0) + prev.tokens, t.prompt_tokens or 0)
        for c in conversations
        for prev, t in zip(c, c[1:])
    )
    ttft = [(t.first - t.start) * 1000 for t in later]
    return {
        "later_turns_cached_share": share(later),
        "later_turns_cacheable_share": cacheable / later_prompt if later_prompt else None,
        "all_turns_cached_share": share(every),
        "later_turns_ttft_p50_ms": percentile(ttft, 50),
        "later_turns_ttft_p95_ms": percentile(ttft, 95),
        "first_turn_ttft_p50_ms": percentile([(c[0].first - c[0].start) * 1000 for c in conversations], 50),
    }


async def run_round(call, system: str, turns: int, tokens: int, words: int, says: str = WORKLOADS["pasted"][2]) -> dict:
    convs = await asyncio.gather(
        *(conversation(call, system, i, turns, tokens, words, says) for i in range(CONVERSATIONS))
    )
    return summarize(convs)


async def run(cluster: Optional[BenchCluster], cache_dir: Path, work: Path, opts, progress) -> dict:
    config = SMOKE_CONFIG if opts.smoke else BENCH_CONFIG
    model_dir = ensure_bench_model(cache_dir, config)
    tokens = min(opts.tokens, 16)
    turns = 2 if opts.smoke else 4
    size = 1 if opts.smoke else 0
    http = httpx.AsyncClient(timeout=httpx.Timeout(600), limits=httpx.Limits(max_connections=64))
    calls, apps = {}, []
    try:
        for name in SYSTEMS:
            app = f"bench-{name.replace('_', '-')}"
            options = {"LLM": {"num_replicas": REPLICAS, **_router_options(name)}}
            # A cache dir per app: both run the same conversations, and the prompt cache's disk
            # tier (shared by a node's replicas under the cache dir) must not carry one app's
            # prefixes to the other.
            args = {"cache_dir": str(work / app), "llm": {"default_model": str(model_dir)}}
            url = cluster.deploy(app, args, options)
            apps.append(app)
            await wait_ready(url)
            calls[name] = lambda b, u=url: stream_chat(http, f"{u}/v1/chat/completions", b, keep_text=True)
            progress(f"affinity: {name} is up ({REPLICAS} LLM replicas)")
        for call in calls.values():  # warm-up on every replica, with a system prompt no round uses
            await run_round(call, system_prompt(20), 1, tokens, 10)
        runs: dict = {w: {name: [] for name in SYSTEMS} for w in WORKLOADS}
        shapes = {}
        for workload, (system_words, pasted, says) in WORKLOADS.items():
            system, words = system_prompt(system_words[size]), pasted[size]
            shapes[workload] = {"system_prompt_chars": len(system), "words_pasted_per_turn": words, "turn_says": says}
            for rep in range(opts.repeats):
                names = list(SYSTEMS)
                for name in names[rep % len(names) :] + names[: rep % len(names)]:
                    # A system prompt no earlier round used: every round starts cold.
                    head = f"Round {rep} of the {workload} workload. {system}"
                    m = await run_round(calls[name], head, turns, tokens, words, says)
                    runs[workload][name].append(m)
                    progress(
                        f"affinity: {workload} repeat {rep + 1}/{opts.repeats} {name}: later turns cached "
                        f"{m['later_turns_cached_share']:.0%} (at most {m['later_turns_cacheable_share']:.0%}), "
                        f"TTFT p50 {m['later_turns_ttft_p50_ms']:.0f} ms"
                    )
    finally:
        await http.aclose()
        for app in apps:
            cluster.delete(app)
    results = {
        w: {name: {**median_over_repeats(r), "repeats": r} for name, r in by_router.items()}
        for w, by_router in runs.items()
    }
    return {
        "model": model_dir.name,
        "replicas": REPLICAS,
        "conversations": CONVERSATIONS,
        "turns": turns,
        "tokens_per_request": tokens,
        "workloads": shapes,
        "repeats": opts.repeats,
        "results": results,
        "later_turns_ttft_vs_default": {
            w: ratio(
                r["affinity_router"]["later_turns_ttft_p50_ms"], r["serve_default_router"]["later_turns_ttft_p50_ms"]
            )
            for w, r in results.items()
        },
    }


def render(result: dict) -> str:
    rows = [
        [
            workload,
            SYSTEMS[name],
            m["later_turns_cached_share"],
            m.get("later_turns_cacheable_share"),
            m["all_turns_cached_share"],
            m["later_turns_ttft_p50_ms"],
            m["later_turns_ttft_p95_ms"],
            m["first_turn_ttft_p50_ms"],
        ]
        for workload, by_router in result["results"].items()
        for name, m in by_router.items()
    ]
    out = table(
        [
            "workload",
            "router",
            "cached share, turns 2+",
            "at most (previous turn's prompt + answer)",
            "cached share, all turns",
            "TTFT p50 ms, turns 2+",
            "p95 ms",
            "TTFT p50 ms, turn 1",
        ],
        rows,
    )
    lines = [
        f"- {w}: a {shape['system_prompt_chars']}-character shared system prompt, each user turn "
        f'"{shape["turn_says"]}"'
        + (f" and a {shape['words_pasted_per_turn']}-word passage" if shape["words_pasted_per_turn"] else "")
        + "; TTFT p50 of turns 2+ with the affinity router / Serve's default: "
        + ("-" if (r := result["later_turns_ttft_vs_default"][w]) is None else f"{r:.3g}")
        for w, shape in result["workloads"].items()
    ]
    return (
        out + f"\n\n{result['conversations']} conversations x {result['turns']} turns at a time on "
        f"{result['replicas']} LLM replicas:\n\n" + "\n".join(lines)
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    flat = {f"{w}: {name}": m for w, by_router in result["results"].items() for name, m in by_router.items()}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    percentile_bars(axes[0], flat, "later_turns_ttft_p50_ms", "later_turns_ttft_p95_ms", "turns 2+: TTFT ms")
    names = list(flat)
    axes[1].bar(names, [flat[n]["later_turns_cached_share"] for n in names], label="cached")
    axes[1].plot(names, [flat[n]["later_turns_cacheable_share"] for n in names], "k_", markersize=30, label="at most")
    axes[1].set_title("turns 2+: share of prompt tokens cached")
    axes[1].tick_params(axis="x", labelrotation=20)
    axes[1].legend(loc="lower right")
    return saved(plt, fig, path)
