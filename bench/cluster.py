"""A private Ray cluster with Serve on a free loopback port, and graph apps deployed on it
side by side (each under its own route prefix), torn down at the end."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import httpx

from deployments.slots import SLOTS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchCluster:
    def __init__(self, cache_dir: Path):
        self.cache_dir = Path(cache_dir)
        self.port: Optional[int] = None

    def __enter__(self) -> BenchCluster:
        import ray
        from ray import serve

        from deployments.llm.disk_cache import PROMPT_CACHE_DIR, clear_all
        from graphs.serve import RAY_ENV_DEFAULTS

        # The LLM prompt cache's disk tier outlives the graph: no run may start warm from the last.
        clear_all(self.cache_dir / PROMPT_CACHE_DIR)
        os.environ.pop("RAY_ADDRESS", None)
        # Ray as `make serve` starts it (replicas not niced below the benchmark's own client).
        for name, value in RAY_ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        # Always a new cluster: a bare init() could join another engineer's.
        ray.init(address="local", num_cpus=8, namespace="serve", include_dashboard=False, log_to_driver=False)
        self.port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": self.port})
        return self

    def __exit__(self, *exc) -> None:
        import ray
        from ray import serve

        try:
            serve.shutdown()
        finally:
            ray.shutdown()

    def url(self, prefix: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{prefix}"

    def deploy(self, name: str, args: dict, options: Optional[dict] = None) -> str:
        """Deploy the graph (slots not named in `args` are off) under /<name>; its base URL."""
        from ray import serve

        from graphs.config import GraphArgs
        from graphs.omni import build_graph

        off = {slot: {"enabled": False} for slot in SLOTS}
        full = {"cache_dir": str(self.cache_dir), **off, "security": {"max_concurrent_requests": 256}, **args}
        config = GraphArgs.model_validate(full)  # no env overrides: the benchmark decides
        serve.run(build_graph(config, options or {}), name=name, route_prefix=f"/{name}")
        return self.url(f"/{name}")

    def delete(self, name: str) -> None:
        from ray import serve

        serve.delete(name)

    def replica_names(self, app: str, deployment: str) -> set[str]:
        import ray

        prefix = f"SERVE_REPLICA::{app}#{deployment}#"
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(prefix)}

    def restart_replicas(self, app: str, deployment: str, timeout_s: float = 300) -> None:
        """Kill the deployment's replicas (as a crash would) and wait until Serve has started
        others in their place (ready or not: the caller polls readiness)."""
        import ray

        old = self.replica_names(app, deployment)
        for name in old:
            ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            new = self.replica_names(app, deployment)
            if new and new.isdisjoint(old):
                return
            time.sleep(0.2)
        raise TimeoutError(f"{app}/{deployment}: no replica replaced the killed ones in {timeout_s} s")

    def replica_pids(self, app: str, deployment: str) -> list[int]:
        from deployments.ray_internals import live_actor_pids

        return live_actor_pids(f"ServeReplica:{app}:{deployment}")


def rss_bytes(pid: int) -> Optional[int]:
    """Resident memory of a process on this machine (Linux /proc), None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


async def wait_ready(
    base_url: str, timeout_s: float = 300, path: str = "/readyz", alive: Optional[Callable[[], None]] = None
) -> None:
    """Poll `path` until it answers 200; `alive` raises if the server's process has died."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=10) as http:
        while time.monotonic() < deadline:
            if alive is not None:
                alive()
            try:
                if (await http.get(f"{base_url}{path}")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.5)
    raise TimeoutError(f"{base_url} not ready after {timeout_s}s")
