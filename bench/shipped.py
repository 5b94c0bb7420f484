"""The shipped serve_config.yaml as the benchmarks deploy it: its application args, and its
`deployments:` block turned into build_graph options (replicas, autoscaling, the resources
each replica reserves), so a scenario measures the graph a user starts, under its own prefix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "serve_config.yaml"


def shipped_app(path: Path = CONFIG) -> tuple[dict, dict]:
    """(args, options): the first application's args and its per-deployment Serve options."""
    app = yaml.safe_load(path.read_text())["applications"][0]
    options = {d["name"]: {k: v for k, v in d.items() if k != "name"} for d in app.get("deployments") or []}
    return dict(app["args"]), options


def reserved(options: dict, deployment: str) -> dict:
    """What one replica of `deployment` reserves in the shipped config (CPU share, memory bytes)."""
    actor = options.get(deployment, {}).get("ray_actor_options") or {}
    return {"num_cpus": actor.get("num_cpus"), "memory_bytes": actor.get("memory")}


def status_of(app: str, deployment: str) -> Optional[dict]:
    """Serve's replica states of one deployment ({"RUNNING": 2, "STARTING": 1}), None if absent."""
    from ray import serve

    application = serve.status().applications.get(app)
    if application is None or deployment not in application.deployments:
        return None
    return dict(application.deployments[deployment].replica_states)


def running(app: str, deployment: str) -> int:
    return int((status_of(app, deployment) or {}).get("RUNNING", 0))
