"""Affinity routing's Ray-free half: which key a request carries, and which replica a key goes to
(stable, spread, spilling when hot, moving little when replicas change, strict pins)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest
from deployments.routing.affinity import (
    PinTable,
    bounded_order,
    llm_affinity_key,
    owner_of,
    rank_replicas,
    replica_key,
    strict_choice,
)

SYSTEM = {"role": "system", "content": "You are terse."}
REPLICAS = ["r-a", "r-b", "r-c"]


def chat(*messages, **fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=list(messages), **fields)


def turns(first_user: str, n: int) -> list[ChatCompletionRequest]:
    """The n requests of one conversation: each resends the history and adds a user turn."""
    history = [SYSTEM, {"role": "user", "content": first_user}]
    out = [chat(*history)]
    for i in range(1, n):
        history += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": f"more {i}"}]
        out.append(chat(*history))
    return out


def test_key_precedence_cache_key_then_user_then_session_header_then_prefix():
    msg = {"role": "user", "content": "hi"}
    both = chat(msg, prompt_cache_key="conv-1", user="alice")
    assert llm_affinity_key(both, "sess-9") == "cache:conv-1"
    assert llm_affinity_key(chat(msg, user="alice"), "sess-9") == "user:alice"
    assert llm_affinity_key(chat(msg), "sess-9") == "session:sess-9"
    assert llm_affinity_key(chat(msg)).startswith("prefix:")
    # Namespaced: a user named like a cache key is another key.
    assert llm_affinity_key(chat(msg, user="conv-1")) != llm_affinity_key(chat(msg, prompt_cache_key="conv-1"))


def test_prefix_key_is_one_per_conversation():
    conversation = {llm_affinity_key(r) for r in turns("tell me about rivers", 4)}
    assert len(conversation) == 1  # every turn, whatever its history
    other = llm_affinity_key(turns("tell me about stones", 1)[0])
    assert other not in conversation  # same system prompt, another conversation
    alone = llm_affinity_key(chat({"role": "user", "content": "tell me about rivers"}))
    assert alone not in conversation  # the system prompt is part of the head


def test_completion_key_follows_the_prompt_head():
    head = "x" * 300
    first, later = CompletionRequest(prompt=head), CompletionRequest(prompt=head + " and then more text")
    assert llm_affinity_key(first) == llm_affinity_key(later)
    assert llm_affinity_key(CompletionRequest(prompt=[1, 2, 3])) != llm_affinity_key(
        CompletionRequest(prompt=[1, 2, 4])
    )


def test_prompt_cache_key_is_bounded():
    with pytest.raises(ValidationError):
        chat({"role": "user", "content": "hi"}, prompt_cache_key="k" * 1025)


def test_a_key_ranks_replicas_the_same_way_in_every_router():
    for key in (f"cache:{i}" for i in range(50)):
        assert rank_replicas(key, REPLICAS) == rank_replicas(key, list(reversed(REPLICAS)))


def test_keys_spread_over_replicas():
    firsts = [rank_replicas(f"cache:{i}", REPLICAS)[0] for i in range(300)]
    assert all(60 <= firsts.count(r) <= 140 for r in REPLICAS), {r: firsts.count(r) for r in REPLICAS}


def test_removing_a_replica_moves_only_its_keys_and_adding_one_moves_a_share():
    keys = [f"cache:{i}" for i in range(300)]
    before = {k: rank_replicas(k, REPLICAS)[0] for k in keys}
    after = {k: rank_replicas(k, ["r-a", "r-b"])[0] for k in keys}
    assert all(after[k] == before[k] for k in keys if before[k] != "r-c")
    grown = {k: rank_replicas(k, REPLICAS + ["r-d"])[0] for k in keys}
    moved = [k for k in keys if grown[k] != before[k]]
    assert all(grown[k] == "r-d" for k in moved) and 40 <= len(moved) <= 110


def test_balanced_load_keeps_the_key_on_its_replica():
    key = "cache:conv"
    first = rank_replicas(key, REPLICAS)[0]
    loads = {r: 2 for r in REPLICAS} | {first: 6}
    assert bounded_order(key, loads, max_imbalance=4)[0] == first  # 6 <= 2 + 4
    assert sorted(bounded_order(key, loads, max_imbalance=4)) == sorted(REPLICAS)


def test_a_hot_key_spills_to_its_next_replica_not_anywhere():
    key = "cache:hot"
    ranked = rank_replicas(key, REPLICAS)
    loads = {ranked[0]: 7, ranked[1]: 1, ranked[2]: 0}
    assert bounded_order(key, loads, max_imbalance=4) == [ranked[1], ranked[0], ranked[2]]


def test_a_hot_key_alone_spreads_its_load_over_every_replica():
    """Requests of one key arriving one after another (none finishing) never leave a replica
    more than max_imbalance above the least loaded."""
    loads = {r: 0 for r in REPLICAS}
    for _ in range(60):
        loads[bounded_order("cache:hot", loads, max_imbalance=4)[0]] += 1
    assert max(loads.values()) - min(loads.values()) <= 5, loads


def test_full_and_unknown_replicas_are_not_preferred():
    key = "cache:conv"
    ranked = rank_replicas(key, REPLICAS)
    full = bounded_order(key, {ranked[0]: 8, ranked[1]: 8, ranked[2]: 8}, 4, {r: 8 for r in REPLICAS})
    assert full == ranked  # nobody can take it: Serve retries in rank order with backoff
    assert bounded_order(key, {ranked[0]: None, ranked[1]: 3, ranked[2]: 0}, 4)[0] == ranked[1]
    assert bounded_order(key, {r: None for r in REPLICAS}, 4) == ranked


def test_replica_keys_name_their_replica():
    assert owner_of(replica_key("abc123", "sess-1")) == "abc123"
    assert owner_of("cache:@abc/x") is None and owner_of("@") is None and owner_of("@abc") is None


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def test_strict_keys_stay_pinned_through_scale_up_until_their_replica_goes():
    pins, key = PinTable(ttl_s=60), "session:s1"
    chosen = strict_choice(key, REPLICAS, REPLICAS, pins)
    pins.pin(key, chosen)
    grown = REPLICAS + [f"r-new-{i}" for i in range(20)]  # some rank above `chosen` now
    assert strict_choice(key, grown, grown, pins) == chosen
    # Whatever the router believes about models, a pinned session is not moved.
    assert strict_choice(key, REPLICAS, [r for r in REPLICAS if r != chosen], pins) == chosen
    left = [r for r in REPLICAS if r != chosen]
    pins.keep_only(left)
    assert len(pins) == 0 and strict_choice(key, left, left, pins) in left


def test_pins_expire_after_their_idle_time_and_are_bounded():
    clock = Clock()
    pins = PinTable(ttl_s=10, max_entries=2, clock=clock)
    pins.pin("a", "r-a")
    clock.now = 9
    assert pins.get("a") == "r-a"
    clock.now = 20
    assert pins.get("a") is None
    for key in ("x", "y", "z"):
        pins.pin(key, "r-b")
    assert len(pins) == 2 and pins.get("x") is None
