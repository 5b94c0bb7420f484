"""A replica's models and adapters under their own limits (deployments/control/residency.py),
and ReplicaModels evicting by kind over a fake multiplexer of the shape Serve keeps (as in
test_idle_unload.py), with Serve told of every change."""

from __future__ import annotations

import pytest

from deployments.control.replica_models import ReplicaModels
from deployments.control.residency import ADAPTER, MODEL, evictions, with_adapters
from deployments.control.state import ControlState
from deployments.protocol.errors import APIError
from tests.unit.control.test_idle_unload import FakeEngine, FakeMultiplexer

KINDS = {"base": MODEL, "other": MODEL, "a": ADAPTER, "b": ADAPTER, "c": ADAPTER}
PARENTS = {"a": "base", "b": "base", "c": "other"}


def test_an_adapter_makes_room_among_adapters_only():
    order = ["a", "base", "b", "other", "c"]  # least recently used first
    limits = {MODEL: 2, ADAPTER: 3}
    assert evictions(order, KINDS, PARENTS, limits, ADAPTER) == ["a"]
    assert evictions(order, KINDS, PARENTS, {MODEL: 2, ADAPTER: 4}, ADAPTER) == []


def test_a_model_makes_room_among_models_and_takes_its_adapters():
    order = ["a", "base", "b", "other", "c"]
    assert evictions(order, KINDS, PARENTS, {MODEL: 2, ADAPTER: 8}, MODEL) == ["base", "a", "b"]
    assert evictions(order, KINDS, PARENTS, {MODEL: 1, ADAPTER: 8}, MODEL) == ["base", "other", "a", "b", "c"]
    assert with_adapters("other", order, KINDS, PARENTS) == ["c"]


async def replica(max_models=2, max_adapters=2):
    evicted = []

    async def load(model_id: str):
        return FakeEngine(model_id)

    models = ReplicaModels(
        "llm",
        load,
        max_models,
        max_adapters=max_adapters,
        describe=lambda m: (KINDS.get(m, MODEL), PARENTS.get(m)),
        evicted=lambda m, kind, parent: evicted.append((m, kind, parent)),
    )
    multiplexer = FakeMultiplexer()
    setattr(models._loader, "__serve_multiplex_wrapper", multiplexer)

    async def load_through_serve(model_id: str):  # what `@serve.multiplexed` does on a miss
        multiplexer.models[model_id] = await models._loader(model_id)
        return multiplexer.models[model_id]

    return models, multiplexer, load_through_serve, evicted


async def test_adapters_never_push_models_out_and_go_with_their_model():
    models, multiplexer, load, evicted = await replica(max_models=2, max_adapters=2)
    for name in ("base", "a", "b"):
        await load(name)
    other = await load("other")
    assert sorted(models.loaded()) == ["a", "b", "base", "other"]
    assert sorted(e.model_id for e in models.engines()) == ["base", "other"]  # adapters are no engines
    assert sorted(a.model_id for a in models.adapters()) == ["a", "b"]
    await load("c")  # a third adapter: the least recently used adapter goes, no model
    assert list(multiplexer.models) == ["base", "b", "other", "c"]
    assert evicted == [("a", ADAPTER, "base")]
    assert multiplexer._push_multiplexed_replica_info  # Serve's routers hear of it
    # A model evicted by an operator's remove takes its adapters with it.
    assert await models.evict("other")
    assert other.closed and "c" not in multiplexer.models
    assert sorted(models.loaded()) == ["b", "base"]


async def test_an_idle_model_is_unloaded_with_its_adapters():
    models, multiplexer, load, _ = await replica()
    base, adapter = await load("base"), await load("a")
    assert await models.unload_idle("base")
    assert base.closed and adapter.closed and not multiplexer.models


def test_controls_run_time_adapters_have_their_own_version_and_outlive_a_restart(tmp_path):
    state = ControlState({"llm": "base"}, tmp_path / "control.json")
    before = state.desired["llm"]
    after = state.set_adapter("llm", "a", {"path": "/a", "base": "base"})
    assert after.adapters == {"a": {"path": "/a", "base": "base"}}
    assert after.adapters_version == before.adapters_version + 1 and after.epoch == before.epoch
    assert ControlState({"llm": "base"}, tmp_path / "control.json").desired["llm"].adapters == after.adapters
    with pytest.raises(APIError) as taken:
        state.set_adapter("llm", "a", {"path": "/other", "base": "base"})
    assert taken.value.status_code == 400 and "already been loaded" in taken.value.message
    assert state.set_adapter("llm", "a", None).adapters == {}
    with pytest.raises(APIError) as gone:
        state.set_adapter("llm", "a", None)
    assert gone.value.status_code == 404


async def test_the_agent_hands_the_replica_controls_adapters_once_per_version():
    """As start() does before the replica serves, and on each change its long poll brings."""
    from deployments.control.agent import SlotAgent

    state = ControlState({"llm": "base"})
    state.set_adapter("llm", "a", {"path": "/a", "base": "base"})
    seen = []

    async def changed(adapters):
        seen.append(adapters)

    agent = SlotAgent("llm", None, None, None, list, "base", adapters_changed=changed)
    await agent._take_adapters(state.desired["llm"])
    await agent._take_adapters(state.desired["llm"])  # the same version again: nothing new
    await agent._take_adapters(state.set_adapter("llm", "a", None))
    assert seen == [{"a": {"path": "/a", "base": "base"}}, {}]
