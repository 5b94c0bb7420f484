"""The `Control` deployment: one replica holding each slot's desired state (control/state.py).

Why a control deployment rather than Serve's `user_config`: a user_config change is a redeploy
of the application's config through Serve's controller, which the ingress does not own and which
answers before replicas have loaded anything. Here a load waits for every running replica to
report, the answer lists what each replica did (or which one failed), a replica started later by
autoscaling or a restart asks for the current state before it serves, and the dashboard still
shows the Control deployment next to the slots.

Control also keeps the cluster's voice registry (a `VoiceService`, deployments/voices/service.py):
TTS replicas on any node register and remove voices through it and long-poll its version to keep
their local mirror, so nodes without a shared disk agree on voices. It persists under Control's
own cache directory.

And it keeps the graph's records (a `RecordStore`, deployments/records.py): what a protocol
keeps across requests (stored responses, voice-training jobs), so any ingress replica reads what
another wrote, and an ingress restart loses nothing. Its SQLite file sits beside the voices.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Optional

from ray import serve

from deployments.control.state import RUNNING, ControlState, Desired, ReplicaReport
from deployments.hub import default_cache_dir
from deployments.protocol.keep_alive import describe
from deployments.ray_internals import replica_states, session_dir
from deployments.records import RecordService, RecordStore
from deployments.resources import reserve
from deployments.voices.service import VoiceService

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


def records_file(cache_dir: Optional[str], app: str) -> Path:
    """Where Control keeps the graph's records: beside its voices, per application, not per build
    (a stored response outlives a redeploy, as OpenAI's outlive a model update)."""
    return voice_store_dir(cache_dir, app).parent / "records.sqlite3"


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
        self.voice_service = VoiceService(voice_store_dir(cache_dir, _app_name()))
        self.records = RecordService(RecordStore(records_file(cache_dir, _app_name())))

    async def desired(self, slot: str) -> Desired:
        return self.state.desired[slot]

    async def watch(
        self,
        slot: str,
        epoch: int,
        timeout_s: float = 5.0,
        keep_alive_version: Optional[int] = None,
        adapters_version: Optional[int] = None,
    ) -> Desired:
        """Long poll: returns when the slot's epoch passes `epoch` (or its keep_alive or
        adapters version passes the one given), or after `timeout_s`."""
        desired = self.state.desired[slot]
        news = (
            desired.epoch > epoch
            or (keep_alive_version is not None and desired.keep_alive_version > keep_alive_version)
            or (adapters_version is not None and desired.adapters_version > adapters_version)
        )
        if not news:
            try:
                await asyncio.wait_for(self._changed[slot].wait(), timeout_s)
            except TimeoutError:
                pass
        return self.state.desired[slot]

    async def set_desired(self, slot: str, state: str, model: Optional[str]) -> Desired:
        desired = self.state.set(slot, state, model)
        self._wake(slot)
        logger.info("Slot %s: desired %s %s (epoch %d)", slot, state, model or "", desired.epoch)
        return desired

    async def set_keep_alive(self, slot: str, model: Optional[str], seconds: float) -> Optional[Desired]:
        """A request's keep_alive for `model` (None: the slot's default), for every replica of the
        slot (deployments/control/idle.py); None when the slot has no such model to keep."""
        before = self.state.desired.get(slot)
        desired = self.state.set_keep_alive(slot, model, seconds)
        if desired is not None and desired is not before:
            self._wake(slot)
            logger.info("Slot %s: keep_alive %s for %s", slot, describe(seconds), model or desired.model)
        return desired

    async def set_adapter(self, slot: str, name: str, spec: Optional[dict]) -> Desired:
        """A LoRA adapter loaded (`spec`: {"path", "base"}) or unloaded (None) at run time, for
        every replica and ingress of the graph."""
        desired = self.state.set_adapter(slot, name, spec)  # a refusal is raised as an APIError
        self._wake(slot)
        logger.info("Slot %s: adapter %s %s", slot, name, "loaded" if spec is not None else "unloaded")
        return desired

    def _wake(self, slot: str) -> None:
        event, self._changed[slot] = self._changed[slot], asyncio.Event()
        event.set()  # wake every watcher; later watchers wait on the fresh event

    async def report(self, report: ReplicaReport) -> None:
        self.state.report(report)

    async def wait_applied(self, slot: str, epoch: int, timeout_s: float) -> list[ReplicaReport]:
        """The slot's replica reports once all running replicas reached `epoch` (or at timeout)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            if self.state.applied(slot, epoch, await self._running_replicas(slot)):
                break
            await asyncio.sleep(0.2)
        return await self._serving_replicas(slot)

    async def _serving_replicas(self, slot: str) -> list[ReplicaReport]:
        """The slot's fresh reports from replicas Serve still has, each with Serve's state: a
        killed replica's last report stays fresh for a while (state.py, STALE_AFTER_S)."""
        return self.state.replicas(slot, serve_states=await self._serve_states(slot))

    async def _serve_states(self, slot: str) -> Optional[dict[str, str]]:
        """Serve's state of each of the slot's replicas (deployments/ray_internals.py)."""
        if slot not in self.deployment_names:
            return None
        return await replica_states(_app_name(), self.deployment_names[slot])

    async def status(self) -> dict:
        """Per slot: its desired state and its replicas' reports, with Serve's state of each
        (readiness counts only replicas Serve routes to: deployments/ingress/serving/models.py)."""
        out = {}
        for slot, d in self.state.desired.items():
            replicas = await self._serving_replicas(slot)
            out[slot] = {"desired": d.model_dump(), "replicas": [r.model_dump() for r in replicas]}
        return out

    # ------------------------------------------------------------------ the cluster's voices
    # The TTS replicas' calls, answered by the voice service; a refusal is raised as an APIError.

    async def voices(self, version: int = -1, store: Optional[str] = None, timeout_s: float = 0.0) -> dict[str, Any]:
        """The voice registry's snapshot; a long poll while it is still at `version` of `store`."""
        return await self.voice_service.snapshot(version, store, timeout_s)

    async def voice_file(self, key: str) -> bytes:
        return await self.voice_service.read_file(key)

    async def add_voice_files(self, files: dict[str, bytes]) -> dict[str, Any]:
        return await self.voice_service.add_files(files)

    async def put_voice(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        return await self.voice_service.put(name, entry)

    async def remove_voice(self, name: str) -> dict[str, Any]:
        return await self.voice_service.remove(name)

    # ------------------------------------------------------------------ the graph's records
    # The ingress replicas' calls (deployments/ingress/serving/records.py), answered by the
    # record service; a refusal is raised as an APIError.

    async def record_get(self, namespace: str, key: str) -> Optional[dict[str, Any]]:
        return await self.records.record_get(namespace, key)

    async def record_list(self, namespace: str) -> list[dict[str, Any]]:
        return await self.records.record_list(namespace)

    async def record_put(
        self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None
    ) -> int:
        return await self.records.record_put(namespace, key, value, expected_version)

    async def record_delete(self, namespace: str, key: str) -> bool:
        return await self.records.record_delete(namespace, key)

    async def _running_replicas(self, slot: str) -> int:
        """How many of the slot's replicas Serve routes to, from the same states readiness reads
        (1 when Serve cannot say: an unload then waits for one replica's report)."""
        states = await self._serve_states(slot)
        return 1 if states is None else sum(1 for state in states.values() if state == RUNNING)
