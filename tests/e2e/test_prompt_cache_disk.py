"""The LLM prompt cache's disk tier on the session graph: a conversation's prefix computed before
every LLM replica is killed is served from the node's disk after the restart
(`cached_tokens` equal to that prefix, the same greedy answer); an entry truncated by hand is
ignored and removed, and its prompt gets the cold answer; `/metrics` shows the tier and
`POST /v1/models/cache/clear` empties it. The tier's files are read and damaged from this
process: the graph's cache dir is the session's (tests/e2e/conftest.py, `server`).

That a turn landing on the other replica hits the disk is in tests/e2e/test_llm_affinity.py,
on its two replicas; the tier's logic is tested in process (tests/unit/llm/test_disk_cache.py,
tests/unit/llm/test_prompt_cache_disk.py).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx

from deployments.llm.disk_cache import DATA, ENTRY, PROMPT_CACHE_DIR
from deployments.llm.smollm2 import SMOLLM2_ID
from tests.assertions import wait_for

# Long enough that its caches pass llm.disk_cache_min_tokens (256) with SmolLM2's tokenizer.
# The tokens that hold a conversation's session id: which conversation an entry is. A RAM cache
# may give a prompt the few tokens of the template's opening that every conversation shares, but
# never this many.
START = 40
RULES = "Answer in one short sentence, name the city, and never add a greeting or a question. " * 20


def conversation(topic: str) -> list[dict]:
    # A fresh start for every run: no earlier cache (RAM or disk) shares more than a few tokens.
    return [
        {"role": "system", "content": f"Session {uuid.uuid4().hex}. You teach {topic}. {RULES}"},
        {"role": "user", "content": "What is the capital of France?"},
    ]


def chat(http: httpx.Client, messages: list[dict]) -> tuple[str, dict]:
    body = {"model": SMOLLM2_ID, "messages": messages, "max_tokens": 12, "temperature": 0}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    return answer["choices"][0]["message"]["content"], answer["usage"]


def tokens_of(entry: Path) -> list[int]:
    return json.loads(entry.read_text())["tokens"]


def entries(root: Path) -> set[Path]:
    return set(root.rglob("*" + ENTRY))


def settled(root: Path, quiet_s: float = 2.0) -> bool:
    """No entry appeared or went for `quiet_s`: the background writer has nothing left to write."""
    before = entries(root)
    time.sleep(quiet_s)
    return entries(root) == before


def stored(root: Path, length: int) -> list[Path]:
    """The entries of `length` tokens under the node's prompt-cache directory."""
    return [p for p in entries(root) if p.name.startswith(f"{length:08d}-")]


def llm_replicas() -> set[str]:
    import ray

    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::ominix#LLM#")
    }


def restart_llm_replicas(http: httpx.Client) -> None:
    """Kill every LLM replica of the session graph (as test_faults.py does); return once Serve's
    new ones answer."""
    import ray

    old = llm_replicas()
    assert old, "no running LLM replica"
    for name in old:
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    wait_for(lambda: (new := llm_replicas()) and new.isdisjoint(old), 120)
    wait_for(lambda: serving_again(http), 180)


def serving_again(http: httpx.Client) -> bool:
    try:
        body = {"model": SMOLLM2_ID, "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
        return http.post("/v1/chat/completions", json=body, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_prefix_outlives_its_replica_and_a_truncated_entry_is_ignored(server, http, cache_dir):
    root = cache_dir / PROMPT_CACHE_DIR
    kept, damaged = conversation("geography"), conversation("history")

    kept_answer, usage = chat(http, kept)
    assert usage["prompt_tokens_details"]["cached_tokens"] < START  # cold: see START
    kept_prefix = usage["prompt_tokens"] - 1  # the history's cache: all of the prompt but its last token
    kept_start = tokens_of(wait_for(lambda: stored(root, kept_prefix), 30)[0])[:START]  # written in the background
    before = entries(root)

    damaged_answer, usage = chat(http, damaged)
    assert usage["prompt_tokens_details"]["cached_tokens"] < START
    damaged_prompt = usage["prompt_tokens"]
    wait_for(lambda: stored(root, damaged_prompt - 1), 30)
    # The damaged conversation's entries that its prompt can start from: its system prompt's and
    # its history's (not the kept conversation's answer, which may land meanwhile).
    usable = [
        e for e in entries(root) - before if int(e.name[:8]) < damaged_prompt and tokens_of(e)[:START] != kept_start
    ]
    assert len(usable) == 2, usable
    whole = {}
    for entry in usable:
        data = entry.with_suffix(DATA)
        whole[entry] = data.stat().st_size
        data.write_bytes(data.read_bytes()[: whole[entry] // 2])

    restart_llm_replicas(http)

    answer, usage = chat(http, kept)
    assert usage["prompt_tokens_details"]["cached_tokens"] == kept_prefix, usage
    assert answer == kept_answer

    answer, usage = chat(http, damaged)
    assert usage["prompt_tokens_details"]["cached_tokens"] < START, usage  # nothing from the disk
    assert answer == damaged_answer  # the cold answer, at temperature 0

    # Each truncated entry was removed, then written again, whole, from this cold prefill.
    def rewritten() -> bool:
        return all(e.exists() and e.with_suffix(DATA).stat().st_size == size for e, size in whole.items())

    wait_for(rewritten, 30)

    metrics = http.get("/metrics", headers={"accept": "application/json"}).json()
    disk = metrics["llm"]["models"][SMOLLM2_ID]["prompt_cache"]["disk"]
    assert disk["enabled"] and disk["entries"] >= 1

    # The last answer's own entry (its prompt and answer) is written in the background after the
    # answer: clear once the writer is done, or that write lands after the clear (a CI run did).
    wait_for(lambda: settled(root), 30, interval=0)
    cleared = http.post("/v1/models/cache/clear")
    assert cleared.status_code == 200 and cleared.json()["entries"] >= 1
    assert entries(root) == set()
