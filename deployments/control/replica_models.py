"""The models one slot replica holds: Serve model multiplexing plus the slot's current default.

Every slot (LLM, ASR, TTS, image) keeps its engines the same way: requests that name a model
are routed by Serve's multiplexing to replicas that already hold it, a request that names none
gets the slot's default (set by the control plane), an operator's unload drops them all, and a
model idle past its timeout is unloaded alone (deployments/control/idle.py). A request takes a
lease on the model it uses (`use`), so the idle check never unloads a model with work running;
the control plane loads without one (`load`). An engine is a `SlotEngine`
(deployments/engine_thread.py).

The LLM slot's LoRA adapters are residents of the same multiplexer (their name is the
request's multiplexed model id, so Serve routes an adapter's requests to replicas that hold it):
an adapter is loaded into the engine of the model it runs on, which is loaded first. Each kind
has its own limit, least recently used first (deployments/control/residency.py): Serve's own
eviction, one limit over every resident, would let adapters push models out, so the multiplexer
is given no limit and the replica evicts before each load.

Each load is one INFO line when it starts and one when the model is ready, with its load time
and the memory it took (`load_lines`): with Control's polling off the log (graphs/omni.py), these
are what an idle graph's console says. The engine says when it is unloaded (engine_thread.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Optional, TypeVar

from ray import serve

from deployments.control.idle import ModelUse
from deployments.control.policy import check_model_allowed
from deployments.control.residency import ADAPTER, MODEL, evictions, with_adapters
from deployments.engine_thread import SlotEngine
from deployments.protocol.errors import APIError, unavailable
from deployments.ray_internals import evict_model, multiplex_wrapper

Engine = TypeVar("Engine", bound=SlotEngine)
logger = logging.getLogger("ray.serve")
MiB = 1024 * 1024


def ready_line(slot: str, model_id: str, seconds: float, before: dict[str, int], after: dict[str, int]) -> str:
    """The line a replica logs when a model is ready: how long it took and what it holds now."""
    taken = after.get("mlx_active_bytes", 0) - before.get("mlx_active_bytes", 0)
    memory = f"MLX memory {after.get('mlx_active_bytes', 0) / MiB:.0f} MiB ({taken / MiB:+.0f} MiB)"
    if "rss_bytes" in after:
        memory += f", process RSS {after['rss_bytes'] / MiB:.0f} MiB"
    return f"{slot} slot: {model_id} ready in {seconds:.1f} s; {memory}"


# What a resident is: its kind (MODEL or ADAPTER) and, for an adapter, the model it runs on.
Describe = Callable[[str], tuple[str, Optional[str]]]


def _models_only(model_id: str) -> tuple[str, Optional[str]]:
    return MODEL, None


class ReplicaModels(Generic[Engine]):
    """`load(id)` makes a resident: an engine, or for an adapter (`describe` says which ids are)
    its load into its model's engine. `evicted(id, kind, parent)` is told of each eviction for
    room."""

    def __init__(
        self,
        slot: str,
        load: Callable[[str], Awaitable[Engine]],
        max_models: int,
        max_adapters: int = 0,
        describe: Describe = _models_only,
        evicted: Optional[Callable[[str, str, Optional[str]], None]] = None,
    ):
        self.slot = slot
        self.book = ModelUse()
        self._engines: weakref.WeakSet = weakref.WeakSet()  # every resident, adapters included
        self._limits = {MODEL: max_models, ADAPTER: max_adapters}
        self._evicted = evicted
        self._kinds: dict[str, str] = {}
        self._parents: dict[str, Optional[str]] = {}

        # Serve's multiplexer keeps its LRU on the decorated callable, which must accept
        # attributes: a plain closure, not a bound method.
        async def load_model(model_id: str) -> Engine:
            from deployments.control.agent import memory_snapshot

            kind, parent = describe(model_id)
            await self._make_room(kind)
            logger.info("%s slot: loading %s", slot, model_id)
            before, started = memory_snapshot(), time.monotonic()
            engine = await load(model_id)
            self._engines.add(engine)
            self._kinds[model_id], self._parents[model_id] = kind, parent
            logger.info(ready_line(slot, model_id, time.monotonic() - started, before, memory_snapshot()))
            self.book.loaded(model_id)
            return engine

        self._loader = load_model
        # No limit in Serve's multiplexer: the replica evicts by kind itself (_make_room).
        self.load: Callable[[str], Awaitable[Engine]] = serve.multiplexed(max_num_models_per_replica=-1)(load_model)

    async def _make_room(self, kind: str) -> None:
        """Before a load (under the multiplexer's lock): the least recently used of its kind
        beyond the kind's limit leave, a model with its adapters."""
        wrapper = multiplex_wrapper(self._loader)
        order = list(wrapper.models) if wrapper is not None else []
        taken = []
        for victim in evictions(order, self._kinds, self._parents, self._limits, kind):
            resident = self._take_out(victim)
            if resident is not None:
                taken.append(resident)
                if self._evicted is not None:
                    self._evicted(victim, self.kind(victim), self._parents.get(victim))
        for resident in taken:
            await asyncio.to_thread(resident.shutdown)

    def _take_out(self, model_id: str) -> Optional[Engine]:
        resident = evict_model(self._loader, model_id)
        if resident is not None:
            self.book.unloaded(model_id)
        return resident

    def kind(self, model_id: str) -> str:
        return self._kinds.get(model_id, MODEL)

    def holding(self, model_id: str) -> Optional[Engine]:
        """The resident `model_id` if the multiplexer holds it (its use order untouched)."""
        wrapper = multiplex_wrapper(self._loader)
        return wrapper.models.get(model_id) if wrapper is not None else None

    async def use(self, model_id: str) -> Engine:
        """The engine of `model_id` for the current request, loaded if needed; the model counts
        as in use until the request's task ends."""
        self.book.lease(model_id)
        return await self.load(model_id)

    def engines(self) -> list[Engine]:
        """The engines (models) held; adapters are not engines."""
        return [e for e in self.residents() if self.kind(e.model_id) == MODEL]

    def residents(self) -> list[Engine]:
        return [e for e in list(self._engines) if not e.closed]

    def loaded(self) -> list[str]:
        """The ids held: models and adapters."""
        return [e.model_id for e in self.residents()]

    def adapters(self) -> list[Engine]:
        return [e for e in self.residents() if self.kind(e.model_id) == ADAPTER]

    async def evict(self, model_id: str) -> bool:
        """Take a resident out now (an adapter an operator removed), its adapters with it."""
        wrapper = multiplex_wrapper(self._loader)
        order = list(wrapper.models) if wrapper is not None else []
        victims = [model_id, *with_adapters(model_id, order, self._kinds, self._parents)]
        taken = [r for r in map(self._take_out, victims) if r is not None]  # all out before any await
        for resident in taken:
            await asyncio.to_thread(resident.shutdown)
        return bool(taken)

    async def for_request(
        self, default: Optional[str], allowed: Sequence[str], models_dir: Optional[str] = None
    ) -> Engine:
        """The engine for the current request: the model it names, else the slot's default."""
        model_id = serve.get_multiplexed_model_id() or default
        if model_id is None:
            raise unavailable(f"The {self.slot} slot has no model loaded; load one with POST /v1/models/load")
        if model_id != default:
            check_model_allowed(model_id, allowed, models_dir, self.slot)
        try:
            return await self.use(model_id)
        except APIError:
            raise
        except Exception as e:
            raise unavailable(f"Model '{model_id}' could not be loaded: {e}") from None

    async def unload_idle(self, model_id: str) -> bool:
        """Unload `model_id` (a model: with its adapters) unless a request holds it: checked and
        taken out of the multiplexer in one step (no await in between), so a request that comes
        after loads it again."""
        if self.book.busy(model_id):
            return False
        return await self.evict(model_id)

    async def unload_all(self) -> None:
        # Evicting through the multiplexer calls each engine's __del__ (thread stop, cache
        # clear); engines it no longer tracks are shut down directly.
        wrapper = multiplex_wrapper(self._loader)
        while wrapper is not None and wrapper.models:
            await wrapper.unload_model_lru()
        for engine in list(self._engines):
            await asyncio.to_thread(engine.shutdown)
        for model_id in list(self.book.uses):
            self.book.unloaded(model_id)

    def check_health(self) -> None:
        """Raise if an engine thread died: the replica cannot serve and Serve must replace it."""
        for engine in list(self._engines):
            engine.check_health()
