"""The LLM prompt cache's disk tier on the session graph: a conversation's first turn is written
to the node's disk when its second turn reuses it (its second sight; a turn seen once stays in
RAM), so after every LLM replica is killed the second turn asked again is served from the disk
(`cached_tokens` equal to the stored prefix, the same greedy answer); an entry truncated by hand
is ignored and removed, and its prompt gets the cold answer; `/metrics` shows the tier and `POST
/v1/models/cache/clear` empties it. The tier's files are read and damaged from this process:
the graph's cache dir is the session's (tests/e2e/conftest.py, `server`).

Before the disk tier admitted on a second sight, one request was enough to outlive the replica;
now a prefix a user sends once is never written, so the scenario is a conversation's two turns,
what a user's chat is.

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


def two_turns(http: httpx.Client, root: Path, messages: list[dict]) -> tuple[list[dict], str, int, Path]:
    """A conversation's first turn (nothing written: seen once) and its second (which reuses the
    first from RAM: written then). Returns the second turn's messages, answer and cached tokens,
    and the entry written: where a cache of the first turn was kept (its prompt or its answer)."""
    before = entries(root)
    answer, usage = chat(http, messages)
    assert usage["prompt_tokens_details"]["cached_tokens"] < START  # cold: see START
    first_prompt = usage["prompt_tokens"]
    assert settled(root) and entries(root) == before  # a turn seen once stays in RAM
    messages = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And of Italy?"}]
    answer, usage = chat(http, messages)
    reused = usage["prompt_tokens_details"]["cached_tokens"]
    assert reused >= first_prompt - 1, usage  # the whole first turn, from RAM
    (entry,) = wait_for(lambda: entries(root) - before, 30)  # written in the background
    assert first_prompt - 1 <= int(entry.name[:8]) <= reused
    return messages, answer, reused, entry


def test_a_conversation_outlives_its_replica_and_a_truncated_entry_is_ignored(server, http, cache_dir):
    root = cache_dir / PROMPT_CACHE_DIR
    kept, kept_answer, _, kept_entry = two_turns(http, root, conversation("geography"))
    damaged, damaged_answer, _, damaged_entry = two_turns(http, root, conversation("history"))
    assert tokens_of(kept_entry)[:START] != tokens_of(damaged_entry)[:START]  # one conversation each
    data = damaged_entry.with_suffix(DATA)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])

    restart_llm_replicas(http)

    answer, usage = chat(http, kept)
    assert usage["prompt_tokens_details"]["cached_tokens"] == int(kept_entry.name[:8]), usage
    assert answer == kept_answer

    answer, usage = chat(http, damaged)
    assert usage["prompt_tokens_details"]["cached_tokens"] < START, usage  # nothing from the disk
    assert answer == damaged_answer  # the cold answer, at temperature 0
    assert not damaged_entry.exists()  # removed when read

    metrics = http.get("/metrics", headers={"accept": "application/json"}).json()
    disk = metrics["llm"]["models"][SMOLLM2_ID]["prompt_cache"]["disk"]
    assert disk["enabled"] and disk["entries"] >= 1

    # A background write may still land after the answer: clear once the writer is done, or
    # that write lands after the clear (a CI run did).
    wait_for(lambda: settled(root), 30, interval=0)
    cleared = http.post("/v1/models/cache/clear")
    assert cleared.status_code == 200 and cleared.json()["entries"] >= 1
    assert entries(root) == set()
