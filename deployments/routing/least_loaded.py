"""Least-loaded routing without Ray, for slots whose replica runs one job at a time (TTS, image).

Serve's default router (power of two choices) counts a request in a replica's queue length only
once the request has been sent. Two requests that arrive together are routed by two routing
tasks that read the same queue lengths before either request is sent, so both can pick the
same idle replica while another stays idle. On a slot that synthesizes one request at a time
the second then waits a whole synthesis (measured: 7.6 s and 16.3 s for two simultaneous
Kokoro requests on three replicas, docs/routing.md).

So the router reserves the replica it picks at the moment it picks it (`Reservations`), and
ranks every candidate, not two random ones, by ongoing requests plus reservations
(`least_loaded_order`). A reservation ends when Serve sends a request to that replica (its
queue length then counts it) or after `ttl_s`, whichever comes first, so a pick that Serve
did not use (the replica was full) is forgotten quickly.

Used by deployments/routing/router.py (`LeastLoadedRouter`).
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Optional

RESERVATION_TTL_S = 1.0


class Reservations:
    """Replicas picked for a request that Serve has not sent yet, each for at most `ttl_s`."""

    def __init__(self, ttl_s: float = RESERVATION_TTL_S, clock: Callable[[], float] = time.monotonic):
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()  # Serve may call back from its router loop's thread
        self._by_replica: dict[str, deque[float]] = {}

    def reserve(self, replica: str) -> None:
        with self._lock:
            self._by_replica.setdefault(replica, deque()).append(self._clock())

    def release(self, replica: str) -> None:
        """A request was sent to `replica`: its oldest reservation is now in its queue length."""
        with self._lock:
            held = self._by_replica.get(replica)
            if held:
                held.popleft()
            if not held:
                self._by_replica.pop(replica, None)

    def counts(self) -> dict[str, int]:
        """Live reservations per replica (expired ones dropped)."""
        cutoff = self._clock() - self._ttl_s
        with self._lock:
            for replica, held in list(self._by_replica.items()):
                while held and held[0] < cutoff:
                    held.popleft()
                if not held:
                    del self._by_replica[replica]
            return {replica: len(held) for replica, held in self._by_replica.items()}

    def forget(self, alive: set[str]) -> None:
        """Drop the reservations of replicas that are gone."""
        with self._lock:
            for replica in set(self._by_replica) - alive:
                del self._by_replica[replica]


def least_loaded_order(
    loads: Mapping[str, Optional[int]],
    reserved: Mapping[str, int],
    capacities: Mapping[str, int],
    rng: random.Random = random,
) -> list[str]:
    """Every replica, least loaded first: ongoing requests plus reservations. Between equals,
    the one with fewer reservations: a reservation is a request certainly on its way, while
    Serve's count of ongoing requests lags a finished request by a moment (measured: a caller
    that sends again as soon as its answers arrive still finds them counted). Remaining ties
    in random order, so several routers (one per ingress replica) do not all favour the same
    replica. A replica whose load is unknown (its probe failed) or that is full comes last:
    Serve probes it again before sending."""

    def rank(replica: str) -> tuple[int, int, int, float]:
        load, held = loads[replica], reserved.get(replica, 0)
        if load is None:
            return (2, 0, 0, rng.random())
        full = load >= capacities.get(replica, 1)
        return (1 if full else 0, load + held, held, rng.random())

    return sorted(loads, key=rank)
