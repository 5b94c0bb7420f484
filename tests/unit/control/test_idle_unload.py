"""A replica's idle check end to end inside one process, without Ray Serve: the agent's check
over the real ReplicaModels, whose multiplexer holds fake engines (Serve creates its
multiplexer only inside a replica, so the test gives the loader one of the same shape). What
runs on the real graph is tests/e2e/test_idle_unload.py."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from deployments.control.agent import SlotAgent
from deployments.control.idle import IdlePolicy
from deployments.control.replica_models import ReplicaModels


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeEngine:
    def __init__(self, model_id: str):
        self.model_id = model_id
        self.closed = False

    def shutdown(self) -> None:
        self.closed = True


class FakeMultiplexer:
    """What `@serve.multiplexed` keeps on the loader: its models by id, and the push flag."""

    def __init__(self):
        self.models: OrderedDict = OrderedDict()
        self._push_multiplexed_replica_info = False

    async def load_model(self, model_id: str):
        return self.models[model_id]  # a hit: the tests load through `replica()` only


async def replica(clock: Clock, *model_ids: str) -> tuple[ReplicaModels, FakeMultiplexer, SlotAgent]:
    async def start(model_id: str) -> FakeEngine:
        return FakeEngine(model_id)

    models = ReplicaModels("llm", start, max_models=2)
    models.book.clock = clock
    multiplexer = FakeMultiplexer()
    setattr(models._loader, "__serve_multiplex_wrapper", multiplexer)
    for model_id in model_ids:  # what the multiplexer does on a load
        multiplexer.models[model_id] = await models._loader(model_id)

    async def unsupported(*args):
        raise AssertionError("the idle check loads and unloads nothing through these")

    agent = SlotAgent(
        "llm",
        None,
        load_default=unsupported,
        unload_all=unsupported,
        loaded_models=models.loaded,
        fallback_default=model_ids[0],
        models=models,
        idle_policy=IdlePolicy(idle_unload_s=60.0, keep_default_loaded=True),
    )
    agent.default_model = model_ids[0]
    return models, multiplexer, agent


async def test_the_idle_model_is_unloaded_and_the_default_stays():
    clock = Clock()
    models, multiplexer, agent = await replica(clock, "default", "extra")
    extra = multiplexer.models["extra"]
    clock.now += 30
    assert await agent.check_idle() == 1.0 and sorted(models.loaded()) == ["default", "extra"]
    clock.now += 30
    await agent.check_idle()
    assert models.loaded() == ["default"] and list(multiplexer.models) == ["default"]
    assert extra.closed and multiplexer._push_multiplexed_replica_info  # Serve's routers hear of it
    assert agent._model_records()[0]["id"] == "default"


async def test_a_model_a_request_holds_is_not_unloaded_until_the_request_ends():
    clock = Clock()
    models, multiplexer, agent = await replica(clock, "default", "extra")
    agent.keep_alive = {"extra": 0.0}  # Ollama's "unload once answered"
    release = asyncio.Event()

    async def request():
        engine = await models.use("extra")  # loaded already: the multiplexer's hit
        await release.wait()
        return engine

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    clock.now += 1000
    await agent.check_idle()
    assert sorted(models.loaded()) == ["default", "extra"]
    assert {row["id"]: row["in_use"] for row in agent._model_records()} == {"default": 0, "extra": 1}
    release.set()
    await task
    await asyncio.sleep(0)
    await agent.check_idle()
    assert models.loaded() == ["default"]


async def test_keep_alive_for_ever_keeps_it():
    clock = Clock()
    models, _, agent = await replica(clock, "default", "extra")
    agent.keep_alive = {"extra": -1.0}
    clock.now += 10**6
    await agent.check_idle()
    assert sorted(models.loaded()) == ["default", "extra"]
    assert {row["id"]: row["idle_unload_s"] for row in agent._model_records()} == {"default": None, "extra": None}
