"""Every use of Ray's private APIs, in one place, so a Ray upgrade has one file to check.

Ray Serve offers no public way to do these; each function says why it is needed and degrades
to a safe answer when the private API has moved (pyproject.toml bounds `ray[serve]` too).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

logger = logging.getLogger("ray.serve")


def session_dir() -> Optional[Path]:
    """This Ray session's directory (where Control keeps its state file), or None outside Ray.
    Public APIs give the temp dir only, not the session under it."""
    try:
        from ray._private import worker

        return Path(worker._global_node.get_session_dir_path())
    except Exception:
        return None


def serve_http_host() -> Optional[str]:
    """The host Serve's HTTP proxy binds (http_options.host), or None if it cannot be read
    (not inside a Serve cluster: unit tests, `serve build`). The graph builder needs it to
    refuse a keyless non-loopback bind; the builder gets no config object from Serve."""
    try:
        import ray
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        return ray.get(controller.get_http_config.remote(), timeout=10).host
    except Exception as e:
        logger.debug("Could not read Serve's HTTP host: %s", e)
        return None


def multiplex_wrapper(loader: Any) -> Any:
    """The object `@serve.multiplexed` keeps a replica's loaded models in, or None. An operator's
    unload must evict every model, and Serve only evicts one at a time on a new load."""
    return getattr(loader, "__serve_multiplex_wrapper", None)


def evict_model(loader: Any, model_id: str) -> Any:
    """Take one model out of a replica's multiplexer without yielding to the event loop, and
    return it (None if it does not hold it); the caller shuts it down. An idle model is
    unloaded by id (deployments/control/idle.py), and Serve only evicts the least recently
    used. The flag makes the replica push its model ids to Serve's routers again, so requests
    for the model stop preferring this replica."""
    wrapper = multiplex_wrapper(loader)
    if wrapper is None:
        return None
    model = wrapper.models.pop(model_id, None)
    if model is not None:
        wrapper._push_multiplexed_replica_info = True
    return model


def live_actor_pids(class_name: str) -> list[int]:
    """Pids of the live actors of one class (benchmarks: a deployment's replica processes). The
    GCS actor table answers without the dashboard, which the benchmark harness leaves off."""
    import ray._private.state as gcs_state

    actors = gcs_state.actors().values()
    return [a["Pid"] for a in actors if a["ActorClassName"] == class_name and a["State"] == "ALIVE"]


async def power_of_two_choices(router: Any, candidates: list, pending_request: Any) -> list:
    """Serve's default choice (power of two choices) for a request router that has no better
    one (a request without an affinity key). The class is not exported publicly in Ray 2.60."""
    from ray.serve._private.request_router import PowerOfTwoChoicesRequestRouter

    return await PowerOfTwoChoicesRequestRouter.choose_replicas(router, candidates, pending_request)


def fulfill_the_routed_request(router: Any, replica: Any, request_metadata: Any) -> None:
    """Give the replica a routing task chose to the request it was chosen for.

    `MultiplexMixin._fulfill_next_pending_request` hands it to the first pending request of
    the same model, else the queue's head: with keyed requests in flight at once, one session's
    request would go to another session's replica (and the other's routing task is cancelled,
    leaving it pending forever). The base router matches by internal request id."""
    from ray.serve.request_router import RequestRouter

    RequestRouter._fulfill_next_pending_request(router, replica, request_metadata)


async def queue_lens(router: Any, replicas: list) -> dict[str, Optional[int]]:
    """Each replica's ongoing requests, for a request router: from Serve's queue-length cache,
    probed when absent (the cache flag and the probe are the base router's private members)."""
    loads: dict[str, Optional[int]] = {}
    missing = []
    for r in replicas:
        q = router.replica_queue_len_cache.get(r.replica_id) if router._use_replica_queue_len_cache else None
        if q is None:
            missing.append(r)
        loads[r.replica_id.unique_id] = q
    if missing:
        for r, q in await router._probe_queue_lens(missing, 0):
            loads[r.replica_id.unique_id] = q
    return loads


async def replica_states(app: str, deployment: str) -> Optional[dict[str, str]]:
    """Serve's own state of each replica of one deployment (replica unique id -> RUNNING,
    STARTING, ...), or None when it cannot be read (not inside Serve, the private API moved).

    The public `serve.status()` gives counts only, and readiness must tell a replica Serve routes
    to from a crashed one whose last report to Control is still fresh (deployments/control/
    state.py keeps reports for STALE_AFTER_S) or from a new one still starting: measured by
    bench/restart.py, /readyz said ready right after a kill and the next request waited seconds
    for the replacement replica to load its model."""
    try:
        import ray
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        details = await controller.get_deployment_details.remote(app, deployment)
        return {r.replica_id: getattr(r.state, "value", str(r.state)) for r in details.replicas}
    except Exception as e:
        logger.debug("Could not read Serve's replica states of %s/%s: %s", app, deployment, e)
        return None
