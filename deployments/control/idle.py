"""Idle models are unloaded: which of a replica's models have served nothing for long enough.

Each replica decides for its own copies (deployments/control/agent.py runs the check): a copy
that served no request for its timeout is unloaded, so a model that served nothing anywhere is
gone from every replica that held it, and a replica whose copy the router stopped choosing
gives its memory back even while another replica keeps serving the model.

A model's timeout is, in order: never for the slot's default model while `keep_default_loaded`
(the operator's choice outranks any client's); the last request's `keep_alive` for that model
(Ollama's field, deployments/protocol/keep_alive.py), which Control hands every replica; else
the slot's `idle_unload_s` (None: never). A model with a request running is never idle, and its
idle clock starts when its last request ends (or when it was loaded).

`ModelUse` is the book the replica keeps (requests take a lease on the model they use, held
until the request's task ends); `plan` is the decision. Pure: the clock is passed in, no Ray,
no MLX.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Optional

from deployments.protocol.keep_alive import FOREVER

MAX_CHECK_INTERVAL_S = 1.0  # how late an unload may come at worst (a keep_alive change, a new load)


@dataclass(frozen=True)
class IdlePolicy:
    """A slot's idle settings (its config's `idle_unload_s` and `keep_default_loaded`)."""

    idle_unload_s: Optional[float] = None  # None or 0: never
    keep_default_loaded: bool = True


@dataclass
class Use:
    loaded_at: Optional[float] = None
    last_used_at: Optional[float] = None
    active: int = 0  # requests holding the model now


@dataclass
class ModelUse:
    """When each model of one replica was loaded and last used, and how many requests hold it."""

    clock: Callable[[], float] = time.time
    uses: dict[str, Use] = field(default_factory=dict)

    def loaded(self, model: str) -> None:
        now = self.clock()
        use = self.uses.setdefault(model, Use())
        use.loaded_at, use.last_used_at = now, now

    def unloaded(self, model: str) -> None:
        use = self.uses.get(model)
        if use is None:
            return
        if use.active:
            use.loaded_at = None  # a request is loading it again: keep its lease
        else:
            del self.uses[model]

    def begin(self, model: str) -> None:
        use = self.uses.setdefault(model, Use())
        use.active += 1
        use.last_used_at = self.clock()

    def end(self, model: str) -> None:
        use = self.uses.get(model)
        if use is None or use.active == 0:
            return
        use.active -= 1
        use.last_used_at = self.clock()

    def lease(self, model: str) -> None:
        """The current request uses `model` until its task ends (a streamed answer included):
        taken before the request awaits anything, so an unload cannot come in between."""
        self.begin(model)
        task = asyncio.current_task()
        if task is None:  # not in a task: nothing tells when the use ends
            self.end(model)
            return
        task.add_done_callback(lambda _: self.end(model))

    def busy(self, model: str) -> bool:
        use = self.uses.get(model)
        return use is not None and use.active > 0

    def prune(self, loaded: Iterable[str]) -> None:
        """Forget models evicted behind the book's back (Serve's LRU on a new load)."""
        keep = set(loaded)
        for model in [m for m, use in self.uses.items() if m not in keep and not use.active]:
            del self.uses[model]


def timeout_s(model: str, default: Optional[str], policy: IdlePolicy, keep_alive: dict[str, float]) -> Optional[float]:
    """How long `model` may stay idle before it is unloaded; None: it is never unloaded."""
    if model == default and policy.keep_default_loaded:
        return None
    if model in keep_alive:
        seconds = keep_alive[model]
        return None if seconds == FOREVER else seconds
    return policy.idle_unload_s or None


def unload_at(
    model: str, use: Optional[Use], default: Optional[str], policy: IdlePolicy, keep_alive: dict[str, float]
) -> Optional[float]:
    """When `model` is unloaded if nothing uses it before; None: not while it is as it is now
    (never idles, or a request holds it)."""
    timeout = timeout_s(model, default, policy, keep_alive)
    if timeout is None or use is None or use.active:
        return None
    since = use.last_used_at if use.last_used_at is not None else use.loaded_at
    return None if since is None else since + timeout


@dataclass(frozen=True)
class IdlePlan:
    unload: list[str]  # idle now: unload them
    check_in_s: float  # when to look again


def plan(
    now: float,
    loaded: list[str],
    book: ModelUse,
    default: Optional[str],
    policy: IdlePolicy,
    keep_alive: dict[str, float],
) -> IdlePlan:
    """What one replica does now about its idle models. A default that another model evicted
    (one model per replica) is not loaded back here: loading evicts by recency, not by use, so
    it could cut a request that just loaded another model; the next request loads it."""
    deadlines = {m: unload_at(m, book.uses.get(m), default, policy, keep_alive) for m in loaded}
    unload = [m for m, at in deadlines.items() if at is not None and at <= now]
    upcoming = [at - now for at in deadlines.values() if at is not None and at > now]
    return IdlePlan(unload, min([MAX_CHECK_INTERVAL_S, *upcoming]))


def describe(
    loaded: list[str], book: ModelUse, default: Optional[str], policy: IdlePolicy, keep_alive: dict[str, float]
) -> list[dict]:
    """Per loaded model, what /v1/models/status shows: since when, last used, requests holding
    it now, its idle timeout (None: never) and when it goes if nothing uses it."""
    out = []
    for model in loaded:
        use = book.uses.get(model) or Use()
        out.append(
            {
                "id": model,
                "loaded_at": use.loaded_at,
                "last_used_at": use.last_used_at,
                "in_use": use.active,
                "idle_unload_s": timeout_s(model, default, policy, keep_alive),
                "unload_at": unload_at(model, use, default, policy, keep_alive),
            }
        )
    return out
