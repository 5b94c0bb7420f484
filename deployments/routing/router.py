"""Serve request routers that keep a key's requests on one replica (docs/routing.md).

The key travels as Serve's own `session_id` request metadata: the caller sets
`handle.options(session_id=key)` (the ingress's slot client does it for the LLM slot with
`llm_affinity_key`, deployments/ingress/serving/generation.py). Requests without a key are routed by power of two choices, as Serve's
default router does. Model multiplexing comes first: the key picks among the replicas that
hold the request's model (Serve's `MultiplexMixin`), so affinity never loads a model on a
second replica while one holds it.

- `AffinityRouter` (the LLM slot): soft affinity with bounded load (`max_imbalance`).
- `SessionAffinityRouter`: strict (a live session never moves), for stateful sessions.
- `LeastLoadedRouter` (the TTS and image slots): no key; the least loaded replica, reserved
  as it is picked, so simultaneous requests spread over idle replicas.

The choices themselves are Ray-free, in deployments/routing/affinity.py and least_loaded.py.
"""

from __future__ import annotations

import logging
from typing import Optional

from ray.serve.config import RequestRouterConfig
from ray.serve.request_router import (
    FIFOMixin,
    LocalityMixin,
    MultiplexMixin,
    PendingRequest,
    ReplicaID,
    RequestRouter,
    RunningReplica,
)

from deployments.ray_internals import fulfill_the_routed_request, power_of_two_choices, queue_lens
from deployments.routing.affinity import (
    DEFAULT_MAX_IMBALANCE,
    PinTable,
    bounded_order,
    owner_of,
    strict_choice,
)
from deployments.routing.least_loaded import RESERVATION_TTL_S, Reservations, least_loaded_order

logger = logging.getLogger("ray.serve")


class AffinityRouter(LocalityMixin, MultiplexMixin, RequestRouter):
    """Routes a key's requests to the replica the key ranks first, within a load bound.

    `request_router_kwargs`: `max_imbalance` (requests a key's replica may have queued beyond
    the least loaded one before the key spills to its next replica), `strict` (never spill;
    a key stays pinned to its replica while it lives, `pin_ttl_s` after its last request)."""

    def initialize_state(
        self,
        max_imbalance: int = DEFAULT_MAX_IMBALANCE,
        strict: bool = False,
        pin_ttl_s: float = 600.0,
        max_pins: int = 100_000,
    ):
        if not isinstance(max_imbalance, int) or max_imbalance < 0:
            raise ValueError(f"max_imbalance must be a non-negative int, got {max_imbalance!r}")
        self._max_imbalance = max_imbalance
        self._strict = bool(strict)
        self._pins = PinTable(pin_ttl_s, max_pins) if self._strict else None
        logger.info(
            "%s for %s: %s, max_imbalance=%d",
            type(self).__name__,
            self._deployment_id,
            "strict" if self._strict else "soft",
            max_imbalance,
        )

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> list[list[RunningReplica]]:
        key = pending_request.metadata.session_id if pending_request is not None else ""
        if not key:
            return await power_of_two_choices(self, candidate_replicas, pending_request)
        # The routing loop sleeps between rounds only when told to (else it spins).
        pending_request.routing_context.should_backoff = True
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        owner = by_id.get(owner_of(key))
        if owner is not None:
            return [[owner]]
        candidates = [by_id[i.unique_id] for i in self._model_candidates(pending_request) if i.unique_id in by_id]
        if not candidates:
            return []
        if self._strict:
            chosen = strict_choice(key, by_id, [r.replica_id.unique_id for r in candidates], self._pins)
            # Pinned now, not once accepted: a strict key has one candidate, so every retry of
            # this request (a full replica) comes back to it anyway.
            self._pins.pin(key, chosen)
            return [[by_id[chosen]]]
        loads = await queue_lens(self, candidates)
        capacities = {r.replica_id.unique_id: r.max_ongoing_requests for r in candidates}
        order = bounded_order(key, loads, self._max_imbalance, capacities)
        return [[by_id[i]] for i in order]

    def _model_candidates(self, pending_request: PendingRequest) -> set[ReplicaID]:
        """Replicas holding the request's model first (then Serve's fallbacks), else all."""
        if pending_request.metadata.multiplexed_model_id:
            return self.apply_multiplex_routing(pending_request=pending_request)
        return self._replica_id_set

    def _fulfill_next_pending_request(self, replica: RunningReplica, request_metadata=None) -> None:
        # A keyed request's replica belongs to that request, never to another one pending
        # beside it (MultiplexMixin's FIFO matching would swap concurrent sessions).
        if request_metadata is not None and request_metadata.session_id:
            fulfill_the_routed_request(self, replica, request_metadata)
        else:
            super()._fulfill_next_pending_request(replica, request_metadata)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        if self._pins is not None:
            self._pins.keep_only(r.unique_id for r in self._replica_id_set)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        if self._pins is not None:
            self._pins.keep_only(r.unique_id for r in self._replica_id_set)


class SessionAffinityRouter(AffinityRouter):
    """Strict affinity for stateful sessions: `handle.options(session_id=sid)` always reaches
    the replica the session started on while that replica lives (a `replica_key` sid names
    it outright, which holds across ingress replicas and scale-ups)."""

    def initialize_state(self, strict: bool = True, **kwargs):
        super().initialize_state(strict=strict, **kwargs)


class LeastLoadedRouter(FIFOMixin, LocalityMixin, MultiplexMixin, RequestRouter):
    """For slots whose replica runs one job at a time: every candidate ranked by ongoing
    requests plus the picks this router made and Serve has not sent yet
    (deployments/routing/least_loaded.py says why Serve's default router is not enough).
    Model multiplexing and locality come first, as in Serve's default router.

    `request_router_kwargs`: `reservation_ttl_s` (how long a pick counts before Serve sends)."""

    def initialize_state(self, reservation_ttl_s: float = RESERVATION_TTL_S):
        if not isinstance(reservation_ttl_s, (int, float)) or reservation_ttl_s <= 0:
            raise ValueError(f"reservation_ttl_s must be a positive number, got {reservation_ttl_s!r}")
        self._reservations = Reservations(float(reservation_ttl_s))

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: Optional[PendingRequest] = None,
    ) -> list[list[RunningReplica]]:
        if pending_request is not None and pending_request.metadata.multiplexed_model_id:
            ids = self.apply_multiplex_routing(pending_request=pending_request)
        else:
            ids = self.apply_locality_routing(pending_request=pending_request)
        candidates = [self._replicas[i] for i in ids if i in self._replicas]
        if not candidates:
            return []
        loads = await queue_lens(self, candidates)
        # No await between reading the reservations and adding this one: a routing task that
        # runs next sees it.
        capacities = {r.replica_id.unique_id: r.max_ongoing_requests for r in candidates}
        order = least_loaded_order(loads, self._reservations.counts(), capacities)
        self._reservations.reserve(order[0])
        by_id = {r.replica_id.unique_id: r for r in candidates}
        return [[by_id[i]] for i in order]

    def on_send_request(self, replica_id: ReplicaID) -> None:
        super().on_send_request(replica_id)
        self._reservations.release(replica_id.unique_id)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        self._reservations.forget({r.unique_id for r in self._replica_id_set})


# The router of the slots whose replica runs one job at a time (their deployment decorators).
ONE_JOB_AT_A_TIME = RequestRouterConfig(request_router_class=f"{__name__}.{LeastLoadedRouter.__name__}")
