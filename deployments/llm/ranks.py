"""The Ray side of a sharded LLM replica (a gang): its other ranks, as actors in the replica's
placement group, and what the replica (rank 0) knows of them.

Serve creates one placement group per replica of a gang (the LLM slot's placement options:
deployments/llm/config.py): the replica lands in bundle 0, and `Gang.start_engine` starts one
`Rank` actor in each other bundle. Each rank reports its node's address and a free port; rank
0 builds the ring backend's hostfile from them (no file for the user to write), and every rank
joins the MLX group and loads its shard at once (deployments/llm/gang.py). The other ranks then
replay rank 0's rounds until their engine stops.

Faults: a rank that dies ends its `serve` call (its ObjectRef fails); a round that never ends
(MLX's ring waits forever for a rank that stopped answering) is caught by a watchdog on the
round's age. Either makes the replica's health check fail, its requests in flight end with a
503, and Serve replaces the replica, which takes its placement group and every rank with it:
never half a gang serving. A start that hangs (a rank that never begins, or ranks that never
form their group: the ring's init waits for ever too) is bounded the same way
(deployments/llm/gang.py `StartWatch`): the replica's constructor fails and Serve starts a new
gang.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import ray

from deployments.llm.gang import (
    JOINING,
    PLACED,
    RESOLVING,
    GangSpec,
    Membership,
    StartWatch,
    check_model_dir,
    ring_hostfile,
)
from deployments.protocol.errors import APIError

logger = logging.getLogger("ray.serve")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_facts() -> dict:
    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "ip": ray.util.get_node_ip_address()}


@ray.remote(num_cpus=0)
class Rank:
    """One rank > 0 of a gang: an engine that replays rank 0's rounds on its shard."""

    def __init__(self, slot_config: dict, cache_dir: str):
        from deployments import blas

        blas.select()  # before MLX loads, as in every slot replica (deployments/blas.py)
        self.slot_config = slot_config
        self.cache_dir = cache_dir
        self.port = free_port()
        self.engine = None
        self.phase_now = PLACED

    def address(self) -> dict:
        return {**node_facts(), "port": self.port}

    def phase(self) -> str:
        """How far this rank's start has come (deployments/llm/gang.py StartWatch reads it)."""
        return self.phase_now

    async def serve(self, model_id: str, engine_config: Any) -> None:
        """Load this rank's shard and run the engine until rank 0 stops it; raises if it fails."""
        from deployments.hub import resolve_model_dir
        from deployments.llm.engine import LLMEngine
        from deployments.llm.slot import SLOT

        self.phase_now = RESOLVING
        try:
            model_dir = await asyncio.to_thread(
                resolve_model_dir, model_id, builtins=SLOT.builtins, cache_dir=self.cache_dir
            )
            self.phase_now = JOINING
            self.engine = await LLMEngine.start(model_id, Path(model_dir), engine_config)
            await asyncio.to_thread(self.engine._thread.join)
        finally:
            # The next engine's start (a model change on the same gang) is watched from the start.
            self.phase_now = PLACED
        if self.engine.failure is not None:
            raise RuntimeError(
                f"rank {engine_config.gang.rank} of the gang for {model_id} failed: {self.engine.failure}"
            )


class Gang:
    """Rank 0's view of its gang: the other ranks' actors and the engines they run."""

    def __init__(self, spec: GangSpec, slot_config: dict, cache_dir: Path, timeout_s: float):
        self.spec = spec
        self.slot_config = slot_config
        self.cache_dir = str(cache_dir)
        self.timeout_s = timeout_s
        self.ranks: list[Any] = []  # Rank actors, rank 1 first
        self.addresses: list[dict] = []  # every rank's node and port, rank 0 first
        self.serving: list[Any] = []  # the ranks' `serve` calls for the current engine
        self.doorbell_port = 0
        self.engine = None

    async def start_engine(self, model_id: str, model_dir: Path, engine_config: Any):
        """Every rank's engine for `model_id`, started together (the group forms when all join)."""
        from deployments.llm.engine import LLMEngine

        # A split the model cannot take is refused before any rank starts (cheap: no weights).
        await asyncio.to_thread(check_model_dir, model_dir, self.spec, model_id)
        if not self.ranks:
            await self._place_ranks()
        hostfile = ring_hostfile([(a["ip"], a["port"]) for a in self.addresses]) if self.spec.backend == "ring" else ""
        doorbell = f"{self.addresses[0]['ip']}:{self.doorbell_port}"
        joined = threading.Event()
        configs = [
            replace(engine_config, gang=Membership(self.spec, rank, hostfile, doorbell, joined if rank == 0 else None))
            for rank in range(self.spec.size)
        ]
        self.serving = [actor.serve.remote(model_id, configs[i + 1]) for i, actor in enumerate(self.ranks)]
        start = asyncio.ensure_future(LLMEngine.start(model_id, model_dir, configs[0]))
        others = [asyncio.wrap_future(ref.future()) for ref in self.serving]
        watch = StartWatch(self.timeout_s, time.monotonic())
        while not start.done():
            await asyncio.wait([start, *others], timeout=2.0, return_when=asyncio.FIRST_COMPLETED)
            for other in others:
                if other.done():  # a rank ended before the group formed: rank 0 would wait for ever
                    failure = other.exception() or "it stopped"
                    raise RuntimeError(f"the gang for {model_id} could not start: {failure}")
            if not joined.is_set() and not start.done():
                problem = watch.problem(await self._phases(), time.monotonic())
                if problem is not None:  # rank 0's thread stays in MLX's init; the replica goes with it
                    raise RuntimeError(f"the gang for {model_id} could not start: {problem}")
        self.engine = start.result()
        logger.info("LLM gang for %s: %d ranks on %s", model_id, self.spec.size, [a["ip"] for a in self.addresses])
        return self.engine

    async def _phases(self) -> list[Optional[str]]:
        """Each other rank's phase; None for one that does not answer within a second."""
        refs = [actor.phase.remote() for actor in self.ranks]
        ready, _ = await asyncio.to_thread(ray.wait, refs, num_returns=len(refs), timeout=1.0)
        done = set(ready)
        return [ray.get(ref) if ref in done else None for ref in refs]

    async def _place_ranks(self) -> None:
        from ray.util import get_current_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = get_current_placement_group()
        if group is None:
            raise RuntimeError("a gang replica runs in its placement group (the LLM slot's placement options)")
        replica = ray.get_runtime_context().get_actor_name() or "llm"
        self.ranks = [
            Rank.options(
                name=f"{replica}:rank-{rank}",
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
            ).remote(self.slot_config, self.cache_dir)
            for rank in range(1, self.spec.size)
        ]
        others = await asyncio.gather(*(actor.address.remote() for actor in self.ranks))
        self.doorbell_port = free_port()  # rank 0 wakes the others on it (deployments/llm/gang.py)
        self.addresses = [{**node_facts(), "port": free_port(), "rank": 0}] + [
            {**a, "rank": i + 1} for i, a in enumerate(others)
        ]

    def check(self) -> None:
        """Raise when a rank is gone or a round has been running past the watchdog's limit;
        the streams in flight end with a 503 first."""
        problem = self._problem()
        if problem is None:
            return
        if self.engine is not None:
            self.engine.fail_streams(APIError(503, f"The model's gang lost a rank: {problem}", "service_unavailable"))
        raise RuntimeError(problem)

    def _problem(self) -> Optional[str]:
        ready, _ = ray.wait(self.serving, num_returns=len(self.serving), timeout=0) if self.serving else ([], [])
        for ref in ready:
            try:
                ray.get(ref)
                if self.engine is not None and not self.engine.closed:
                    return "a rank's engine stopped"
            except Exception as e:
                return f"a rank failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        began = self.engine.round_began if self.engine is not None else None
        if began is not None and time.monotonic() - began > self.timeout_s:
            return f"a round of the gang has run for over {self.timeout_s:.0f} s (a rank stopped answering)"
        return None

    def describe(self) -> list[dict]:
        """Each rank with its node, for GET /v1/models/status."""
        return [dict(a) for a in self.addresses]
