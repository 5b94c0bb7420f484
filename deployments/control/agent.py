"""The replica side of the control plane: keeps one slot replica in line with Control.

A slot deployment gives the agent three callables (load a model and make it the default,
unload everything, list what is loaded); the agent long-polls Control, applies each change,
and reports back: the epoch it reached, its models, its memory, and what an unload freed.
A failed load keeps the previous default serving and is reported as this replica's error.

Given the replica's models and the slot's idle policy, the agent also unloads the models that
served nothing for their timeout (deployments/control/idle.py decides; the requests'
keep_alive values come from Control with the desired state), and reports when each model was
loaded and last used.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Awaitable, Callable
from typing import Optional

from deployments.control.idle import MAX_CHECK_INTERVAL_S, IdlePolicy, describe, plan
from deployments.control.state import LOADED, Desired, ReplicaReport

logger = logging.getLogger("ray.serve")

REPORT_WHILE_LOADING_S = 2.0  # a download can take minutes: status shows its progress


def memory_snapshot() -> dict[str, int]:
    import mlx.core as mx

    snapshot = {
        "mlx_active_bytes": int(mx.get_active_memory()),
        "mlx_cache_bytes": int(mx.get_cache_memory()),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    rss = current_rss_bytes()
    if rss is not None:  # the peak above never comes down after an unload; this does
        snapshot["rss_bytes"] = rss
    return snapshot


def current_rss_bytes(status_file: str = "/proc/self/status") -> Optional[int]:
    """This process's resident memory now (Linux); None where /proc is not there (macOS)."""
    try:
        with open(status_file) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def node_facts() -> dict:
    """The Ray node this replica runs on, for /v1/models/status: which machine serves a slot
    when the cluster has several (docs/multi-node.md)."""
    import ray

    context = ray.get_runtime_context()
    return {"id": context.get_node_id(), "ip": ray.util.get_node_ip_address(), "labels": context.get_node_labels()}


class SlotAgent:
    def __init__(
        self,
        slot: str,
        control,  # DeploymentHandle of Control, or None when the graph has no control plane
        load_default: Callable[[str], Awaitable[None]],
        unload_all: Callable[[], Awaitable[None]],
        loaded_models: Callable[[], list[str]],
        fallback_default: str,
        warnings: Optional[list[str]] = None,  # what the replica lacks (a fast BLAS, ffmpeg), with the fix
        models=None,  # the replica's ReplicaModels: idle models are unloaded from it
        idle_policy: IdlePolicy = IdlePolicy(),
        ranks: Optional[Callable[[], Optional[list[dict]]]] = None,  # a sharded replica's ranks
        adapters_changed: Optional[Callable[[dict[str, dict]], Awaitable[None]]] = None,
    ):
        self.slot = slot
        self._ranks = ranks
        self.control = control
        self._load_default = load_default
        self._unload_all = unload_all
        self._loaded_models = loaded_models
        self.default_model: Optional[str] = None
        self.unloaded = False
        self.epoch = -1
        self.error: Optional[str] = None
        self.freed_bytes: Optional[int] = None
        self.loading: Optional[str] = None
        self._fallback = fallback_default
        self.warnings = list(warnings or [])
        self._task: Optional[asyncio.Task] = None
        self.models = models
        self.idle_policy = idle_policy
        self.keep_alive: dict[str, float] = {}  # model -> the last request's keep_alive (Control's)
        self.keep_alive_version = -1
        self._idle_task: Optional[asyncio.Task] = None
        # The slot's run-time LoRA adapters (Control's), handed to the replica as they change.
        self._adapters_changed = adapters_changed
        self.adapters_version = -1

    async def start(self) -> None:
        """Apply the slot's current state before the replica serves, then follow changes."""
        desired = Desired(slot=self.slot, model=self._fallback)
        if self.control is not None:
            try:
                desired = await asyncio.wait_for(self.control.desired.remote(self.slot), 30)
            except Exception as e:
                logger.warning("Control unreachable (%s); starting with the configured default", e)
        self._take_keep_alive(desired)
        await self._take_adapters(desired)
        await self._apply(desired, initial=True)
        if self.control is not None:
            self._task = asyncio.create_task(self._follow())
        if self.models is not None:
            self._idle_task = asyncio.create_task(self._unload_idle_models())

    async def _follow(self) -> None:
        while True:
            try:
                await self._report()
                desired = await self.control.watch.remote(
                    self.slot,
                    self.epoch,
                    keep_alive_version=self.keep_alive_version,
                    adapters_version=self.adapters_version if self._adapters_changed is not None else None,
                )
                self._take_keep_alive(desired)
                await self._take_adapters(desired)
                if desired.epoch > self.epoch:
                    await self._apply(desired)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # Control restarting: keep serving, try again shortly
                logger.warning("Slot %s agent: %s", self.slot, e)
                await asyncio.sleep(2)

    async def _apply(self, desired: Desired, initial: bool = False) -> None:
        if desired.state == LOADED and desired.model:
            try:
                await self._load_reporting_progress(desired.model)
                self.default_model, self.unloaded, self.error = desired.model, False, None
            except Exception as e:
                if initial and desired.model != self._fallback:
                    # A new replica must serve something: the configured default.
                    logger.error("Loading %s failed (%s); falling back to %s", desired.model, e, self._fallback)
                    await self._load_default(self._fallback)
                    self.default_model = self._fallback
                elif initial:
                    raise
                self.error = f"Loading '{desired.model}' failed: {e}"
                logger.error("Slot %s: %s", self.slot, self.error)
        else:
            before = memory_snapshot()["mlx_active_bytes"]
            await self._unload_all()
            self.freed_bytes = max(0, before - memory_snapshot()["mlx_active_bytes"])
            self.default_model, self.unloaded, self.error = None, True, None
        self.epoch = desired.epoch
        if not initial:
            await self._report()

    def _take_keep_alive(self, desired: Desired) -> None:
        self.keep_alive, self.keep_alive_version = dict(desired.keep_alive), desired.keep_alive_version

    async def _take_adapters(self, desired: Desired) -> None:
        if self._adapters_changed is not None and desired.adapters_version != self.adapters_version:
            await self._adapters_changed(dict(desired.adapters))
            self.adapters_version = desired.adapters_version

    # ------------------------------------------------------------------ idle models

    async def _unload_idle_models(self) -> None:
        while True:
            try:
                wait_s = await self.check_idle()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a failed check must not end the checking
                logger.warning("Slot %s: idle check failed: %s", self.slot, e)
                wait_s = MAX_CHECK_INTERVAL_S
            await asyncio.sleep(wait_s)

    async def check_idle(self) -> float:
        """Unload this replica's idle models; returns when to look again (seconds)."""
        loaded = self._loaded_models()
        self.models.book.prune(loaded)
        default = None if self.unloaded else self.default_model
        book = self.models.book
        idle = plan(book.clock(), loaded, book, default, self.idle_policy, self.keep_alive)
        unloaded = [model for model in idle.unload if await self.models.unload_idle(model)]
        for model in unloaded:
            logger.info("Slot %s: unloaded %s, idle past its timeout", self.slot, model)
        if unloaded:
            await self._report_quietly()  # /v1/models/status shows it gone now, not at the next poll
        return idle.check_in_s

    async def _load_reporting_progress(self, model: str) -> None:
        self.loading = model
        load = asyncio.ensure_future(self._load_default(model))
        try:
            while not load.done():
                await asyncio.wait({load}, timeout=REPORT_WHILE_LOADING_S)
                if not load.done():
                    await self._report_quietly()
            await load
        finally:
            self.loading = None

    async def _report_quietly(self) -> None:
        try:
            await self._report()
        except Exception as e:  # a status report must never fail a load
            logger.debug("Progress report failed: %s", e)

    async def _report(self) -> None:
        if self.control is None:
            return
        from ray import serve

        from deployments import accelerator, blas
        from deployments.download_progress import active_downloads

        report = ReplicaReport(
            slot=self.slot,
            replica_id=serve.get_replica_context().replica_id.unique_id,
            epoch=self.epoch,
            default_model=self.default_model,
            loaded_models=self._loaded_models(),
            models=self._model_records(),
            memory=memory_snapshot(),
            freed_bytes=self.freed_bytes,
            error=self.error,
            loading={"model": self.loading, "download": active_downloads().get(self.loading)} if self.loading else None,
            blas=blas.select().as_dict(),
            accelerator=accelerator.runtime().as_dict(),
            warnings=self.warnings,
            node=node_facts(),
            ranks=self._ranks() if self._ranks is not None else None,
        )
        await self.control.report.remote(report)

    def _model_records(self) -> list[dict]:
        if self.models is None:
            return []
        default = None if self.unloaded else self.default_model
        return describe(self._loaded_models(), self.models.book, default, self.idle_policy, self.keep_alive)

    def stop(self) -> None:
        for task in (self._task, self._idle_task):
            if task is not None:
                task.cancel()
