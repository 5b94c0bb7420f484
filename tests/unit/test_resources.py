"""The shipped resource model (serve_config.yaml, docs/resources.md): every slot's max_replicas
fits on the 2-core machine's logical CPUs with room to spare, every deployment reserves memory,
and the deployments' own defaults say the same as the config."""

from __future__ import annotations

import pytest

from bench.shipped import shipped_app
from deployments.resources import MiB, reserve
from deployments.slots import SLOTS as REGISTRY

CPU_BUDGET = 1.0  # half of the 2-core CI box: the rest is for apps deployed next to the graph
SLOTS = tuple(slot.deployment_name for slot in REGISTRY.values())


def most_replicas(options: dict) -> int:
    scaling = options.get("autoscaling_config")
    return scaling["max_replicas"] if scaling else options.get("num_replicas", 1)


def test_every_slot_at_max_replicas_fits_the_cpu_budget():
    _, deployments = shipped_app()
    total = sum(most_replicas(o) * o["ray_actor_options"]["num_cpus"] for o in deployments.values())
    assert total <= CPU_BUDGET, {name: o["ray_actor_options"] for name, o in deployments.items()}
    assert all(most_replicas(deployments[slot]) >= 2 for slot in SLOTS)  # and they can scale


def test_every_deployment_reserves_memory():
    _, deployments = shipped_app()
    assert all(o["ray_actor_options"].get("memory", 0) >= 128 * MiB for o in deployments.values())


KEYS = ("num_cpus", "memory")


@pytest.mark.parametrize(
    "name, module, cls",
    [
        ("Ingress", "deployments.ingress.deployment", "Ingress"),
        ("Control", "deployments.control.deployment", "Control"),
    ],
)
def test_the_deployments_defaults_match_the_config(name, module, cls):
    """Apps built in code (tests, benchmarks) reserve what `serve run serve_config.yaml` does."""
    import importlib

    deployment = getattr(importlib.import_module(module), cls)
    shipped = shipped_app()[1][name]["ray_actor_options"]
    assert {k: deployment.ray_actor_options.get(k) for k in KEYS} == {k: shipped[k] for k in KEYS}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_each_slots_registry_resources_match_the_config(name):
    from graphs.omni import slot_options

    slot = REGISTRY[name]
    derived = slot_options(slot, slot.config())["ray_actor_options"]
    shipped = shipped_app()[1][slot.deployment_name]["ray_actor_options"]
    assert {k: derived.get(k) for k in KEYS} == {k: shipped[k] for k in KEYS}


def test_reserve_is_in_mib():
    assert reserve(0.1, 512) == {"num_cpus": 0.1, "memory": 512 * 2**20}


def test_a_stopping_replica_may_finish_its_longest_request():
    """Serve's default drain (20 s) cut a synthesis off when the autoscaler stopped a busy TTS
    replica: each slot's replicas drain as long as its longest route lets a request run."""
    from graphs.omni import slot_options

    for slot in REGISTRY.values():
        longest = max(r.timeout_s for r in slot.routes if r.timeout_s is not None)
        assert slot_options(slot, slot.config())["graceful_shutdown_timeout_s"] == max(longest, 20.0)
    assert slot_options(REGISTRY["tts"], REGISTRY["tts"].config())["graceful_shutdown_timeout_s"] == 600.0
