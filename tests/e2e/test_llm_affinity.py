"""Affinity routing on a slot with two LLM replicas: a conversation's turns stay on the replica
holding its prefix cache, different conversations spread over both, a hot key spills onto the
second replica, and model multiplexing still decides first. The strict router (for stateful
sessions) runs end to end under the ASR slot's sessions (tests/e2e/test_asr_session_affinity.py);
that it never moves a session, however hot, is tested in process (tests/unit/routing/).

Runs one more application ("affinity": two LLM replicas of the tiny model, tiny CPU shares) in
the session's cluster. Which replica served a request is read from each replica's own counters,
through a handle whose `replica_key` names that replica. Its replicas share the session's cache
dir, so the prompt cache's disk tier too.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from contextlib import AsyncExitStack

import httpx
import pytest

from deployments.llm.disk_cache import PROMPT_CACHE_DIR
from tests.assertions import only_slots, replica_ids, wait_for

TINY = "ominix-tiny-qwen3"
APP = "affinity"
SMALL = {"ray_actor_options": {"num_cpus": 0.01}}


def deploy(app: str, router: str, kwargs: dict, cache_dir, models_dir=None) -> None:
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    args = {
        "cache_dir": str(cache_dir),
        "llm": {"models_dir": str(models_dir)} if models_dir else {},
        **only_slots("llm"),
    }
    config = RequestRouterConfig(
        request_router_class=f"deployments.routing.router.{router}", request_router_kwargs=kwargs
    )
    options = {"LLM": {"num_replicas": 2, "request_router_config": config, **SMALL}, "Ingress": SMALL, "Control": SMALL}
    serve.run(build_graph(GraphArgs.from_args(args), options=options), name=app, route_prefix=f"/{app}", blocking=False)


def two_replicas(http: httpx.Client) -> list[str]:
    return replica_ids(http, "llm", timeout_s=180)


@pytest.fixture(scope="module")
def affinity(server, cache_dir, tiny_llm_dir, tmp_path_factory):
    from ray import serve

    models_dir = tmp_path_factory.mktemp("affinity-models")
    second = models_dir / "tiny-b"
    shutil.copytree(tiny_llm_dir, second)
    deploy(APP, "AffinityRouter", {"max_imbalance": 2}, cache_dir, models_dir)
    http = httpx.Client(base_url=f"{server}/{APP}", timeout=120)
    yield http, two_replicas(http), str(second)
    http.close()
    serve.delete(APP)


def finished(replica_id: str, app: str = APP) -> dict[str, int]:
    """Requests each model finished on that replica (its own counters)."""
    from ray import serve

    from deployments.routing.affinity import replica_key

    handle = serve.get_deployment_handle("LLM", app_name=app).options(session_id=replica_key(replica_id, "stats"))
    return {model: s["finished"] for model, s in handle.stats.remote().result(timeout_s=60).items()}


def served_by(ids, send, app: str = APP):
    """Run `send()` (one request) and say which replica finished it."""
    before = {r: sum(finished(r, app).values()) for r in ids}
    result = send()
    grew = [r for r in ids if sum(finished(r, app).values()) > before[r]]
    assert len(grew) == 1, (before, grew)
    return grew[0], result


def chat(http, messages, **fields):
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, **fields}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_stats_reach_the_replica_a_replica_key_names(affinity):
    http, ids, _ = affinity

    def totals():
        reads = {r: {sum(finished(r).values()) for _ in range(4)} for r in ids}
        assert all(len(v) == 1 for v in reads.values()), reads  # every read reached the same replica
        return {r: v.pop() for r, v in reads.items()}

    before = totals()
    for _ in range(6):
        chat(http, [{"role": "user", "content": "count me"}])  # one key: one replica
    after = totals()
    assert sorted(after[r] - before[r] for r in ids) == [0, 6], (before, after)


def test_a_conversation_stays_on_the_replica_that_caches_it(affinity):
    http, ids, _ = affinity
    for conv in range(3):
        history = [{"role": "system", "content": "You are a careful assistant."}]
        replicas, previous_prompt = set(), None
        for turn in range(3):
            history.append({"role": "user", "content": f"Conversation {conv}, turn {turn}: tell me more."})
            replica, answer = served_by(ids, lambda: chat(http, history, prompt_cache_key=f"conv-{conv}"))
            replicas.add(replica)
            usage = answer["usage"]
            if previous_prompt is not None:
                # The whole previous prompt (but the last token, which always runs) was cached.
                assert usage["prompt_tokens_details"]["cached_tokens"] >= previous_prompt - 1, usage
            previous_prompt = usage["prompt_tokens"]
            history.append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
        assert len(replicas) == 1, (conv, replicas)


def test_a_turn_on_the_other_replica_starts_from_the_prefix_on_disk(affinity, cache_dir):
    """The replicas share the node's prompt-cache directory (deployments/llm/disk_cache.py): a
    conversation's first turn reaches it when its second turn reuses it on the same replica (its
    second sight; a turn seen once stays in RAM), and a later turn that lands on the replica that
    never saw the conversation (another routing key, as a client without one may get)
    prefills only what the disk does not hold."""
    http, ids, _ = affinity
    root = cache_dir / PROMPT_CACHE_DIR
    history = [
        {"role": "system", "content": f"Session {uuid.uuid4().hex}. " + "Be brief and exact. " * 60},
        {"role": "user", "content": "Name a river."},
    ]
    first, answer = served_by(ids, lambda: chat(http, history, prompt_cache_key="disk-0"))
    prompt = answer["usage"]["prompt_tokens"]
    before = set(root.rglob("*.json"))
    history += [
        {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And another?"},
    ]
    second, answer = served_by(ids, lambda: chat(http, history, prompt_cache_key="disk-0"))
    assert second == first
    # The first turn's prompt or answer, written in the background (the module's shorter
    # conversations before this one may still be writing theirs).
    (entry,) = wait_for(lambda: [e for e in set(root.rglob("*.json")) - before if int(e.name[:8]) >= prompt - 1], 30)
    stored = int(entry.name[:8])
    history += [
        {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And a third?"},
    ]
    for k in range(1, 24):  # keys until one lands on the other replica
        replica, answer = served_by(ids, lambda k=k: chat(http, history, prompt_cache_key=f"disk-{k}"))
        if replica != first:
            break
    assert replica != first, "every key stayed on one replica"
    # At least the first turn, from disk (more when a key before landed on the first replica:
    # that repeat of the third turn was its second sight, and wrote it).
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] >= stored, answer["usage"]


def test_user_and_session_header_and_prefix_keep_affinity_too(affinity):
    http, ids, _ = affinity
    base = [{"role": "user", "content": "which replica am I on?"}]
    for fields, headers in (({"user": "alice"}, {}), ({}, {"x-session-id": "sess-42"}), ({}, {})):
        seen = set()
        for _ in range(3):

            def send():
                r = http.post(
                    "/v1/chat/completions", json={"messages": base, "max_tokens": 2, **fields}, headers=headers
                )
                assert r.status_code == 200, r.text

            seen.add(served_by(ids, send)[0])
        assert len(seen) == 1, (fields, headers, seen)


def test_different_keys_spread_over_both_replicas(affinity):
    http, ids, _ = affinity
    where = [
        served_by(ids, lambda k=k: chat(http, [{"role": "user", "content": "hello"}], prompt_cache_key=f"spread-{k}"))[
            0
        ]
        for k in range(12)
    ]
    assert set(where) == set(ids), where


def hot_burst(http: httpx.Client, ids: list[str], key: str, n: int = 10, app: str = APP) -> dict[str, int]:
    """n long streams of one key, each opened once the previous one is generating (so every
    routing decision sees the earlier ones queued, as a hot key's load looks to the router):
    how many each replica finished."""
    before = {r: sum(finished(r, app).values()) for r in ids}
    body = {
        "messages": [{"role": "user", "content": "the same hot conversation"}],
        "max_tokens": 64,
        "ignore_eos": True,
        "prompt_cache_key": key,
        "stream": True,
    }

    async def drain(lines, first_line: str) -> int:
        chunks = int(first_line.startswith("data:"))
        async for line in lines:
            chunks += line.startswith("data:")
        return chunks

    async def burst():
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=120) as client, AsyncExitStack() as streams:
            drains = []
            for _ in range(n):
                r = await streams.enter_async_context(client.stream("POST", "/v1/chat/completions", json=body))
                assert r.status_code == 200
                lines = r.aiter_lines()
                first = await anext(lines)  # generating now: the router counts it on its replica
                drains.append(asyncio.ensure_future(drain(lines, first)))
            return await asyncio.gather(*drains)

    assert all(chunks > 1 for chunks in asyncio.run(burst()))
    # A replica counts a stream once its generation ends, just after the last chunk.
    deadline = time.monotonic() + 30
    while True:
        gained = {r: sum(finished(r, app).values()) - before[r] for r in ids}
        if sum(gained.values()) == n or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert sum(gained.values()) == n, gained
    return gained


def test_a_hot_key_spills_onto_the_second_replica(affinity):
    http, ids, _ = affinity
    gained = hot_burst(http, ids, "hot")
    assert min(gained.values()) >= 1, gained


def test_multiplexing_decides_before_the_key(affinity):
    http, ids, second = affinity
    holder, _ = served_by(
        ids, lambda: chat(http, [{"role": "user", "content": "b"}], model=second, prompt_cache_key="mx-0")
    )
    # Serve's routers learn which replica holds a model from the replica's (periodic) report.
    wait_for(lambda: second in finished(holder), 30)
    time.sleep(3)
    for k in range(1, 9):
        replica, _ = served_by(
            ids, lambda k=k: chat(http, [{"role": "user", "content": "b"}], model=second, prompt_cache_key=f"mx-{k}")
        )
        assert replica == holder, k
    assert [second in finished(r) for r in ids].count(True) == 1  # never loaded on the other replica
