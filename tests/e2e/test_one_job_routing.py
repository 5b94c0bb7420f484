"""The TTS and image slots' router on real Serve: requests sent together to a deployment whose
replicas run one job at a time land on different idle replicas.

Serve's default router (power of two choices) reads every replica's queue length before any of
the simultaneous requests is sent, so two of them can pick the same idle replica and the second
waits a whole job (two Kokoro requests on three replicas: 7.6 s and 16.3 s, docs/routing.md).
`LeastLoadedRouter` reserves a replica as it picks it.

The deployment here is a stand-in for a slot replica: an asyncio lock held for `hold_s` per
request (one job at a time, as a TTS replica's engine thread), three replicas with tiny CPU
shares, deployed next to the session's graph. The same workload on Serve's default router is
run too and its collisions printed, to show what the test guards against.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

REPLICAS = 3
ROUNDS = 8
HOLD_S = 0.4
PAUSE_S = 0.1


def one_job_app(router_class):
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    options = {"request_router_config": RequestRouterConfig(request_router_class=router_class)} if router_class else {}

    @serve.deployment(num_replicas=REPLICAS, max_ongoing_requests=4, ray_actor_options={"num_cpus": 0.01}, **options)
    class OneJobAtATime:
        def __init__(self):
            self.lock = asyncio.Lock()

        async def __call__(self, hold_s: float) -> str:
            async with self.lock:
                await asyncio.sleep(hold_s)
            return serve.get_replica_context().replica_id.unique_id

    return OneJobAtATime.bind()


def collisions(handle) -> list[list[str]]:
    """ROUNDS rounds of REPLICAS simultaneous requests; the rounds where two shared a replica."""

    async def rounds():
        bad = []
        for _ in range(ROUNDS):
            # A router learns that a request finished a moment after its caller does (the
            # warm-up's, the last round's); requests that reach an ingress over HTTP come at
            # least that much later.
            await asyncio.sleep(PAUSE_S)
            served = await asyncio.gather(*(handle.remote(HOLD_S) for _ in range(REPLICAS)))
            if len(set(served)) < REPLICAS:
                bad.append(served)
        return bad

    return asyncio.run(rounds())


@pytest.fixture(scope="module")
def deploy(server):
    import cloudpickle
    from ray import serve

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # replicas need not import tests/
    names = []

    def run(name: str, router_class):
        handle = serve.run(one_job_app(router_class), name=name, route_prefix=None)
        names.append(name)
        handle.remote(0).result()  # the handle has seen the replicas (serve.run waited for them)
        return handle

    yield run
    for name in names:
        serve.delete(name)
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_simultaneous_requests_spread_over_idle_replicas(deploy):
    default = collisions(deploy("one-job-default-router", None))
    print(f"Serve's default router: {len(default)} of {ROUNDS} rounds put two requests on one replica: {default}")
    least_loaded = collisions(deploy("one-job-least-loaded", "deployments.routing.router.LeastLoadedRouter"))
    assert least_loaded == []
