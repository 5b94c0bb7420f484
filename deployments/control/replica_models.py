"""The models one slot replica holds: Serve model multiplexing plus the slot's current default.

Every slot (LLM, ASR, TTS, image) keeps its engines the same way: requests that name a model
are routed by Serve's multiplexing to replicas that already hold it, a request that names none
gets the slot's default (set by the control plane), an operator's unload drops them all, and a
model idle past its timeout is unloaded alone (deployments/control/idle.py). A request takes a
lease on the model it uses (`use`), so the idle check never unloads a model with work running;
the control plane loads without one (`load`). An engine is a `SlotEngine`
(deployments/engine_thread.py).

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


class ReplicaModels(Generic[Engine]):
    def __init__(self, slot: str, load: Callable[[str], Awaitable[Engine]], max_models: int):
        self.slot = slot
        self.book = ModelUse()
        self._engines: weakref.WeakSet = weakref.WeakSet()

        # Serve's multiplexer keeps its LRU on the decorated callable, which must accept
        # attributes: a plain closure, not a bound method.
        async def load_model(model_id: str) -> Engine:
            from deployments.control.agent import memory_snapshot

            logger.info("%s slot: loading %s", slot, model_id)
            before, started = memory_snapshot(), time.monotonic()
            engine = await load(model_id)
            self._engines.add(engine)
            logger.info(ready_line(slot, model_id, time.monotonic() - started, before, memory_snapshot()))
            self.book.loaded(model_id)
            return engine

        self._loader = load_model
        self.load: Callable[[str], Awaitable[Engine]] = serve.multiplexed(max_num_models_per_replica=max_models)(
            load_model
        )

    async def use(self, model_id: str) -> Engine:
        """The engine of `model_id` for the current request, loaded if needed; the model counts
        as in use until the request's task ends."""
        self.book.lease(model_id)
        return await self.load(model_id)

    def engines(self) -> list[Engine]:
        return [e for e in list(self._engines) if not e.closed]

    def loaded(self) -> list[str]:
        return [e.model_id for e in self.engines()]

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
        """Unload `model_id` unless a request holds it: checked and taken out of the multiplexer
        in one step (no await in between), so a request that comes after loads it again."""
        if self.book.busy(model_id):
            return False
        engine = evict_model(self._loader, model_id)
        if engine is None:
            return False
        self.book.unloaded(model_id)
        await asyncio.to_thread(engine.shutdown)
        return True

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
