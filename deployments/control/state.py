"""The slot control plane's state: what each slot should serve, and what each replica does.

Operators change a slot's desired state (load model X as the default, or unload); every replica
of the slot follows it and reports back. A change gets a new epoch; a load or unload request
waits until every running replica of the slot has reported that epoch, so the answer says
what happened on each replica. Pure Python: the Serve deployment around it is in control/deployment.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel

from deployments.protocol.errors import APIError

LOADED, UNLOADED = "loaded", "unloaded"
RUNNING = "RUNNING"  # Serve's state of a replica it routes requests to (ray.serve ReplicaState)
STALE_AFTER_S = 20.0  # a replica not heard from for this long is gone (reports come every ~5 s)


class Desired(BaseModel):
    slot: str
    state: Literal["loaded", "unloaded"] = LOADED
    model: Optional[str] = None
    epoch: int = 0
    # model -> the last request's keep_alive for it, in seconds (-1: for ever): every replica
    # holding the model unloads it after that long idle (deployments/control/idle.py). Its own
    # version, not the epoch: it changes nothing a load or an unload waits for.
    keep_alive: dict[str, float] = {}
    keep_alive_version: int = 0
    # The LLM slot's LoRA adapters loaded at run time (POST /v1/load_lora_adapter): name ->
    # {"path", "base"}, for every replica and ingress; its own version too, as keep_alive's.
    adapters: dict[str, dict] = {}
    adapters_version: int = 0


class ReplicaReport(BaseModel):
    slot: str
    replica_id: str
    epoch: int
    default_model: Optional[str] = None
    loaded_models: list[str] = []
    memory: dict[str, int] = {}  # mlx_active_bytes, mlx_cache_bytes, rss_bytes
    freed_bytes: Optional[int] = None  # set by an unload
    error: Optional[str] = None  # the last load that failed, kept until the next success
    # per loaded model: id, loaded_at, last_used_at, in_use, idle_unload_s, unload_at (idle.describe)
    models: list[dict] = []
    loading: Optional[dict] = None  # {"model", "download": bytes/files so far} while a load runs
    blas: Optional[dict] = None  # the BLAS MLX's CPU backend multiplies with (deployments/blas.py)
    # What its MLX runs on: backend (cuda, metal, cpu), device, its name, the build (deployments/accelerator.py)
    accelerator: Optional[dict] = None
    warnings: list[str] = []  # what it runs without, with the fix (deployments/system_deps.py)
    node: Optional[dict] = None  # the Ray node it runs on: id, ip, labels (docs/multi-node.md)
    ranks: Optional[list[dict]] = None  # a sharded LLM replica's ranks and their nodes (docs/multi-node.md)
    seen_at: float = 0.0
    # Serve's state of the replica when Control answered (RUNNING, STARTING...; None: unknown):
    # set by Control from Serve, never by the replica, which cannot know whether Serve routes to it.
    serve_state: Optional[str] = None


class ControlState:
    def __init__(self, defaults: dict[str, str], state_file: Optional[Path] = None):
        self.desired: dict[str, Desired] = {slot: Desired(slot=slot, model=model) for slot, model in defaults.items()}
        self.reports: dict[str, ReplicaReport] = {}
        self.state_file = state_file
        self._restore()

    def set(self, slot: str, state: str, model: Optional[str]) -> Desired:
        current = self.desired.get(slot) or Desired(slot=slot)
        model = model if state == LOADED else current.model
        self.desired[slot] = current.model_copy(update={"state": state, "model": model, "epoch": current.epoch + 1})
        self._persist()
        return self.desired[slot]

    def set_keep_alive(self, slot: str, model: Optional[str], seconds: float) -> Optional[Desired]:
        """A request's keep_alive for `model` (None: the slot's default), kept for every replica;
        None when there is no such model to keep (an unknown slot, a slot unloaded)."""
        current = self.desired.get(slot)
        model = model or (current.model if current is not None and current.state == LOADED else None)
        if current is None or model is None:
            return None
        if current.keep_alive.get(model) == seconds:
            return current
        self.desired[slot] = current.model_copy(
            update={
                "keep_alive": {**current.keep_alive, model: seconds},
                "keep_alive_version": current.keep_alive_version + 1,
            }
        )
        self._persist()
        return self.desired[slot]

    def set_adapter(self, slot: str, name: str, spec: Optional[dict]) -> Desired:
        """Add (or with None remove) a run-time adapter of the slot, for every replica: a name
        already there is vLLM's 400, removing one that is not its 404 (two ingress replicas
        loading one name at once: the first wins)."""
        current = self.desired[slot]
        if spec is not None and name in current.adapters:
            raise APIError(
                400, f"The lora adapter '{name}' has already been loaded.", "invalid_request_error", "lora_name"
            )
        if spec is None and name not in current.adapters:
            raise APIError(
                404, f"The lora adapter '{name}' cannot be found.", "invalid_request_error", "lora_name", "not_found"
            )
        adapters = {k: v for k, v in current.adapters.items() if k != name}
        if spec is not None:
            adapters[name] = dict(spec)
        self.desired[slot] = current.model_copy(
            update={"adapters": adapters, "adapters_version": current.adapters_version + 1}
        )
        self._persist()
        return self.desired[slot]

    def report(self, report: ReplicaReport, now: Optional[float] = None) -> None:
        report.seen_at = now if now is not None else time.time()
        self.reports[report.replica_id] = report

    def replicas(
        self, slot: str, now: Optional[float] = None, serve_states: Optional[dict[str, str]] = None
    ) -> list[ReplicaReport]:
        """The slot's replicas heard from lately. With `serve_states` (Serve's state per replica
        id, deployments/ray_internals.py `replica_states`), only those Serve still has, each
        with its state: a killed replica's last report stays fresh for STALE_AFTER_S, and
        counting it made /readyz say ready while its replacement was still loading."""
        now = now if now is not None else time.time()
        fresh = sorted(
            (r for r in self.reports.values() if r.slot == slot and now - r.seen_at < STALE_AFTER_S),
            key=lambda r: r.replica_id,
        )
        if serve_states is None:
            return fresh
        return [
            r.model_copy(update={"serve_state": serve_states[r.replica_id]})
            for r in fresh
            if r.replica_id in serve_states
        ]

    def applied(self, slot: str, epoch: int, expected_replicas: int, now: Optional[float] = None) -> bool:
        done = [r for r in self.replicas(slot, now) if r.epoch >= epoch]
        return len(done) >= max(expected_replicas, 1)

    # A restarted control replica must not forget an operator's load: the state is on disk.
    def _persist(self) -> None:
        if self.state_file is None:
            return
        tmp = self.state_file.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({s: d.model_dump() for s, d in self.desired.items()}))
        tmp.replace(self.state_file)

    def _restore(self) -> None:
        if self.state_file is None or not self.state_file.exists():
            return
        try:
            saved = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        for slot, raw in saved.items():
            if slot in self.desired:  # slots no longer configured are ignored
                self.desired[slot] = Desired.model_validate(raw)
