"""/readyz counts a replica only when it serves the slot's default and Serve routes to it: a
replacement still starting or a crashed replica's fresh report does not make the graph ready."""

from __future__ import annotations

import asyncio

from deployments.control.state import LOADED, UNLOADED
from deployments.ingress.serving.models import ServingModels, serves

DESIRED = {"state": LOADED, "model": "a"}


def replica(serve_state, model="a"):
    return {"replica_id": "r", "default_model": model, "serve_state": serve_state, "blas": None, "warnings": []}


def test_a_replica_serves_when_it_holds_the_default_and_serve_routes_to_it():
    assert serves(replica("RUNNING"), DESIRED)
    assert not serves(replica("STARTING"), DESIRED)  # loaded, but Serve does not route to it yet
    assert not serves(replica("STOPPING"), DESIRED)
    assert not serves(replica("RUNNING", model="b"), DESIRED)
    assert not serves(replica("RUNNING"), {**DESIRED, "state": UNLOADED})
    assert serves(replica(None), DESIRED)  # Serve's view unknown: the report decides, as before


class _Models(ServingModels):
    def __init__(self, status):
        self._status = status

    async def control_status(self, timeout_s: float = 0):
        return self._status


def test_readiness_waits_for_a_running_replica():
    def ready(*replicas):
        return asyncio.run(_Models({"llm": {"desired": DESIRED, "replicas": list(replicas)}})._slot_readiness())

    slots, ok = ready(replica("STARTING"))
    assert not ok and slots["llm"]["reason"] == "no replica has loaded a yet"
    slots, ok = ready(replica("STARTING"), replica("RUNNING"))
    assert ok and slots["llm"]["replicas"] == 1
