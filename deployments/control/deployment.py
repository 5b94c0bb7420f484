"""The `Control` deployment: one replica holding each slot's desired state (control/state.py).

Why a control deployment rather than Serve's `user_config`: a user_config change is a redeploy
of the application's config through Serve's controller, which the ingress does not own and which
answers before replicas have loaded anything. Here a load waits for every running replica to
report, the answer lists what each replica did (or which one failed), a replica started later by
autoscaling or a restart asks for the current state before it serves, and the dashboard still
shows the Control deployment next to the slots.

Control also keeps the cluster's voice registry (tts/voice_store.py): TTS replicas on any node
register and remove voices through it and long-poll its version to keep their local mirror, so
nodes without a shared disk agree on voices. It persists under Control's own cache directory.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Optional

from ray import serve

from deployments.control.state import ControlState, Desired, ReplicaReport
from deployments.hub import default_cache_dir
from deployments.ray_internals import session_dir
from deployments.resources import reserve
from deployments.tts.voice_store import VoiceStore, VoiceStoreError

logger = logging.getLogger("ray.serve")


def state_file(session_dir: Path, app: str, build_id: str) -> Path:
    """Where one deployment of one application keeps its slots' desired state.

    Per application, because several apps share a Ray cluster (one's unload must not empty the
    next one's slots), and per build (a new id each time the builder runs), so a restarted
    Control replica (same init args) finds its state but a redeploy starts from its config."""
    return session_dir / f"ominix-control-{_safe(app)}-{build_id}.json"


def voice_store_dir(cache_dir: Optional[str], app: str) -> Path:
    """Where Control keeps the cluster's voices: under the cache directory of the node it runs
    on, per application, and not per build: voices outlive redeploys, as a voices.json does."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "control" / _safe(app) / "voices"


def _safe(app: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in app)


def _app_name() -> str:
    try:
        return serve.get_replica_context().app_name
    except Exception:  # not inside a replica
        return "default"


def _session_state_file(build_id: str) -> Optional[Path]:
    session = session_dir()
    if session is None:
        return None
    try:
        return state_file(session, serve.get_replica_context().app_name, build_id)
    except Exception:  # not inside a replica
        return None


@serve.deployment(name="Control", num_replicas=1, max_ongoing_requests=1000, ray_actor_options=reserve(0, 256))
class Control:
    def __init__(
        self,
        defaults: dict[str, str],
        deployment_names: dict[str, str],
        build_id: str = "default",
        cache_dir: Optional[str] = None,
    ):
        # Per slot: its configured default model and its Serve deployment (from the graph builder).
        self.state = ControlState(defaults, _session_state_file(build_id))
        self.deployment_names = deployment_names
        self._changed = {slot: asyncio.Event() for slot in defaults}
        self.voice_store = VoiceStore(voice_store_dir(cache_dir, _app_name()))
        self._voices_changed = asyncio.Event()
        self._voices_lock = asyncio.Lock()  # one change at a time: each is a disk write

    async def desired(self, slot: str) -> Desired:
        return self.state.desired[slot]

    async def watch(self, slot: str, epoch: int, timeout_s: float = 5.0) -> Desired:
        """Long poll: returns when the slot's epoch passes `epoch`, or after `timeout_s`."""
        if self.state.desired[slot].epoch <= epoch:
            try:
                await asyncio.wait_for(self._changed[slot].wait(), timeout_s)
            except TimeoutError:
                pass
        return self.state.desired[slot]

    async def set_desired(self, slot: str, state: str, model: Optional[str]) -> Desired:
        desired = self.state.set(slot, state, model)
        event, self._changed[slot] = self._changed[slot], asyncio.Event()
        event.set()  # wake every watcher; later watchers wait on the fresh event
        logger.info("Slot %s: desired %s %s (epoch %d)", slot, state, model or "", desired.epoch)
        return desired

    async def report(self, report: ReplicaReport) -> None:
        self.state.report(report)

    async def wait_applied(self, slot: str, epoch: int, timeout_s: float) -> list[ReplicaReport]:
        """The slot's replica reports once all running replicas reached `epoch` (or at timeout)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            if self.state.applied(slot, epoch, self._running_replicas(slot)):
                break
            await asyncio.sleep(0.2)
        return self.state.replicas(slot)

    async def status(self) -> dict:
        return {
            slot: {"desired": d.model_dump(), "replicas": [r.model_dump() for r in self.state.replicas(slot)]}
            for slot, d in self.state.desired.items()
        }

    # ------------------------------------------------------------------ the cluster's voices
    # Errors come back as {"error": {...}} rather than raised: the TTS replica turns them into
    # the HTTP error, and a plain dict crosses Ray without the exception having to pickle.

    async def voices(self, version: int = -1, store: Optional[str] = None, timeout_s: float = 0.0) -> dict[str, Any]:
        """The voice registry's snapshot; a long poll while it is still at `version` of `store`."""
        snapshot = self.voice_store.snapshot()
        if snapshot["store"] == store and snapshot["version"] <= version and timeout_s > 0:
            try:
                await asyncio.wait_for(self._voices_changed.wait(), timeout_s)
            except TimeoutError:
                pass
            snapshot = self.voice_store.snapshot()
        return snapshot

    async def voice_file(self, key: str) -> bytes:
        return await asyncio.to_thread(self.voice_store.read_file, key)

    async def add_voice_files(self, files: dict[str, bytes]) -> dict[str, Any]:
        """{"keys": {file name: key}}: a voice put next refers to its files by these keys."""
        keys = await self._voice_change(self.voice_store.add_files, files)
        return keys if "error" in keys else {"keys": keys}

    async def put_voice(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        return await self._voice_change(self.voice_store.put, name, entry)

    async def remove_voice(self, name: str) -> dict[str, Any]:
        return {"removed": await self._voice_change(self.voice_store.remove, name)}

    async def _voice_change(self, change, *args) -> Any:
        async with self._voices_lock:
            try:
                result = await asyncio.to_thread(change, *args)
            except VoiceStoreError as e:
                return {"error": e.as_dict()}
        event, self._voices_changed = self._voices_changed, asyncio.Event()
        event.set()
        return result

    def _running_replicas(self, slot: str) -> int:
        try:
            app = serve.get_replica_context().app_name
            deployment = serve.status().applications[app].deployments[self.deployment_names[slot]]
            return deployment.replica_states.get("RUNNING", 0)
        except Exception:
            return 1
