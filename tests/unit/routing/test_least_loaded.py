"""Least-loaded routing's Ray-free half: simultaneous picks spread over idle replicas (the
reservation a pick leaves), reservations end when Serve sends or after their TTL, and full or
unknown replicas come last."""

from __future__ import annotations

import random

from deployments.routing.least_loaded import Reservations, least_loaded_order

IDLE = {"r-a": 0, "r-b": 0, "r-c": 0}
CAPACITY = {"r-a": 4, "r-b": 4, "r-c": 4}


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pick(loads, reservations: Reservations, rng) -> str:
    """What LeastLoadedRouter does for one routing task: rank, then reserve the first."""
    chosen = least_loaded_order(loads, reservations.counts(), CAPACITY, rng)[0]
    reservations.reserve(chosen)
    return chosen


def test_simultaneous_picks_take_different_idle_replicas():
    # Three requests routed before any is sent: Serve's queue lengths still say 0 everywhere.
    for seed in range(50):
        rng = random.Random(seed)
        reservations = Reservations()
        assert len({pick(IDLE, reservations, rng) for _ in range(3)}) == 3
        # A fourth goes behind one of them, not on top of two.
        fourth = pick(IDLE, reservations, rng)
        assert reservations.counts()[fourth] == 2 and sum(reservations.counts().values()) == 4


def test_a_send_turns_the_reservation_into_queue_length():
    reservations = Reservations()
    reservations.reserve("r-a")
    reservations.reserve("r-a")
    reservations.release("r-a")  # Serve sent one: its queue length counts it now
    assert reservations.counts() == {"r-a": 1}
    reservations.release("r-a")
    reservations.release("r-a")  # a send this router did not pick for (another rank): no-op
    assert reservations.counts() == {}
    # Sent requests count through the loads: r-a busy, the next pick is elsewhere.
    loads = {"r-a": 1, "r-b": 0}
    assert least_loaded_order(loads, {}, CAPACITY, random.Random(0))[0] == "r-b"


def test_an_unused_pick_expires():
    clock = Clock()
    reservations = Reservations(ttl_s=1.0, clock=clock)
    reservations.reserve("r-a")  # picked, but Serve found it full and sent elsewhere
    clock.now += 0.5
    assert reservations.counts() == {"r-a": 1}
    clock.now += 0.6
    assert reservations.counts() == {}


def test_gone_replicas_are_forgotten():
    reservations = Reservations()
    reservations.reserve("r-a")
    reservations.reserve("r-b")
    reservations.forget({"r-b"})
    assert reservations.counts() == {"r-b": 1}


def test_order_is_least_loaded_first_full_and_unknown_last():
    loads = {"r-a": 3, "r-b": 1, "r-c": 4, "r-d": None, "r-e": 2}
    capacity = {**CAPACITY, "r-d": 4, "r-e": 4}
    order = least_loaded_order(loads, {"r-b": 2}, capacity, random.Random(1))
    # r-b: 1 ongoing + 2 reserved = 3 ties with r-a; r-c is full; r-d did not answer its probe.
    assert order[0] == "r-e" and set(order[1:3]) == {"r-a", "r-b"} and order[3:] == ["r-c", "r-d"]


def test_between_equals_a_reserved_replica_comes_after_a_counted_one():
    # r-a's request has just finished but Serve still counts it; r-b has a pick on its way.
    for seed in range(20):
        order = least_loaded_order({"r-a": 1, "r-b": 0, "r-c": 2}, {"r-b": 1}, CAPACITY, random.Random(seed))
        assert order == ["r-a", "r-b", "r-c"]


def test_ties_are_broken_at_random():
    # Several routers (one per ingress replica) must not all favour the same idle replica.
    firsts = {least_loaded_order(IDLE, {}, CAPACITY, random.Random(seed))[0] for seed in range(30)}
    assert firsts == set(IDLE)
