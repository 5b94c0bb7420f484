"""Operating the slots at runtime (OminiX-API's /readyz, /v1/models/status|load|unload|report,
/version) and the model list: `ServingModels` asks the Control deployment, which acts on all
replicas of a slot and reports per replica (deployments/control/), and assembles the answers.
A load that fails on any replica puts the previous model back as the slot's desired default.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from deployments import SERVICE_NAME, __version__
from deployments.accelerator import label
from deployments.control.capabilities import registry
from deployments.control.state import LOADED, RUNNING, UNLOADED
from deployments.ingress.serving.adapters import take_runtime_adapters
from deployments.ingress.serving.cuda import NOT_CONFIGURED_STATUS, cuda_model_cards, cuda_status
from deployments.ingress.state import IngressState
from deployments.protocol.errors import invalid_request, server_error
from deployments.protocol.models import (
    LoadResponse,
    ModelsStatus,
    ReplicaView,
    SlotStatus,
    UnloadResponse,
)
from deployments.protocol.openai import ModelCard
from deployments.slots import SLOTS

LOAD_TIMEOUT_S = 300.0
UNLOAD_TIMEOUT_S = 30.0
STATUS_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 5.0


def system_summary(replicas: list[dict]) -> dict[str, list]:
    """A slot's BLAS libraries, what its replicas' MLX runs on (deployments/accelerator.py: the
    backend, CUDA, Metal or the CPU, and the device) and what they run without
    (deployments/system_deps.py), each told once: the replicas of a slot on one machine agree,
    and a cluster of Macs and NVIDIA machines shows each kind."""
    libraries: list[dict] = []
    accelerators: list[dict] = []
    for replica in replicas:
        if replica.get("blas") and replica["blas"] not in libraries:
            libraries.append(replica["blas"])
        if replica.get("accelerator") and replica["accelerator"] not in accelerators:
            accelerators.append(replica["accelerator"])
    warnings = list(dict.fromkeys(line for replica in replicas for line in replica.get("warnings") or []))
    return {"blas": libraries, "accelerators": accelerators, "warnings": warnings}


def serves(replica: dict, desired: dict) -> bool:
    """Whether a replica's report counts for readiness: it serves the slot's desired default and
    Serve routes requests to it (RUNNING). A crashed replica's last report, or a replacement
    still starting, would answer ready while the next request waits for the new replica's
    model load (measured: seconds, bench/restart.py). No state (Control could not ask Serve):
    the report alone decides, as before."""
    return (
        desired["state"] == LOADED
        and replica["default_model"] == desired["model"]
        and replica.get("serve_state") in (None, RUNNING)
    )


class ServingModels:
    def __init__(self, state: IngressState):
        self.state = state

    async def control_status(self, timeout_s: float = STATUS_TIMEOUT_S) -> dict[str, Any]:
        return await asyncio.wait_for(self.state.control_plane().call("status"), timeout_s)

    def check_slot(self, slot: str) -> None:
        if slot not in self.state.catalog.slots:
            served = ", ".join(self.state.catalog.slots) or "none"
            raise invalid_request(f"Unknown model_type: {slot}. This graph serves: {served}", "model_type")

    # ------------------------------------------------------------------ reading

    async def loaded(self) -> dict[str, set[str]]:
        """slot -> models loaded on at least one replica (empty if the control plane is away)."""
        if self.state.control is None:
            return {}
        try:
            status = await self.control_status(LIST_TIMEOUT_S)
        except Exception:
            return {}
        if "llm" in status:  # the run-time LoRA adapters, listed with the models
            take_runtime_adapters(self.state, status["llm"]["desired"].get("adapters") or {})
        return {slot: {m for r in info["replicas"] for m in r["loaded_models"]} for slot, info in status.items()}

    async def cards(self) -> list[ModelCard]:
        # CUDA-routed ids first, and only while their worker is ready.
        return [*await cuda_model_cards(self.state), *self.state.catalog.cards(await self.loaded())]

    async def readiness(self) -> tuple[dict[str, Any], bool]:
        """Ready once every slot under the control plane has a replica serving its default model
        and, when a CUDA route is configured, its worker is ready (live probe)."""
        slots, ready = await self._slot_readiness()
        cuda = await cuda_status(self.state)
        if cuda is not None:
            ready = ready and cuda["model_ready"]
        body = {
            "status": "ready" if ready else "not_ready",
            "slots": slots,
            "sglang_cuda": cuda or {"configured": False},
            "ingress": {"warnings": self.state.system_warnings},
        }
        return body, ready

    async def _slot_readiness(self) -> tuple[dict, bool]:
        try:
            status = await self.control_status()
        except Exception as e:
            return {"control": {"ready": False, "reason": f"control plane: {e}"}}, False
        slots, ready = {}, True
        for slot, info in status.items():
            desired = info["desired"]
            serving = [r for r in info["replicas"] if serves(r, desired)]
            system = system_summary(info["replicas"])
            checks = {
                "mlx": sorted({label(a) for a in system["accelerators"]}),
                "blas": sorted({b.get("kind", b["library"]) for b in system["blas"]}),
                "warnings": system["warnings"],
            }
            if serving:
                slots[slot] = {"ready": True, "model": desired["model"], "replicas": len(serving), **checks}
            else:
                ready = False
                reason = (
                    "unloaded by an operator"
                    if desired["state"] == UNLOADED
                    else f"no replica has loaded {desired['model']} yet"
                )
                slots[slot] = {"ready": False, "reason": reason, **checks}
        return slots, ready

    async def status(self) -> ModelsStatus:
        slots = {
            slot: SlotStatus(
                default_model=info["desired"]["model"] if info["desired"]["state"] == LOADED else None,
                state=info["desired"]["state"],
                replicas=[ReplicaView.model_validate(r) for r in info["replicas"]],
                keep_alive=info["desired"].get("keep_alive", {}),
            )
            for slot, info in (await self.control_status()).items()
        }
        return ModelsStatus(
            models={slot: status.default_model for slot, status in slots.items()},
            slots=slots,
            sglang_cuda=await cuda_status(self.state) or NOT_CONFIGURED_STATUS,
        )

    async def version(self) -> dict[str, Any]:
        loaded: list[dict] = []
        system: dict[str, Any] = {"ingress": {"warnings": self.state.system_warnings}}
        try:
            for slot, info in (await self.control_status()).items():
                models = {m for r in info["replicas"] for m in r["loaded_models"]}
                loaded += [{"model": m, "model_type": slot} for m in sorted(models)]
                system[slot] = system_summary(info["replicas"])
        except Exception:  # the control plane is away: the version still answers
            pass
        return {
            "ominix_serve": __version__,
            "service": SERVICE_NAME,
            "capabilities": registry(SLOTS[slot] for slot in self.state.catalog.slots),
            "models_loaded": loaded,
            "system": system,
        }

    # ------------------------------------------------------------------ changing

    async def load(self, slot: str, requested: str) -> LoadResponse:
        """Make `requested` the slot's default on every replica, or keep the previous one."""
        self.check_slot(slot)
        model = self.state.catalog.canonical(slot, requested)  # OminiX-API's `flux` / `zimage`
        self.state.catalog.check_loadable(slot, model)
        control = self.state.control_plane()
        previous = (await self.control_status())[slot]["desired"]
        desired = await control.call("set_desired", slot, LOADED, model)
        replicas = await control.call("wait_applied", slot, desired.epoch, LOAD_TIMEOUT_S)
        failed = [r for r in replicas if r.error or r.default_model != model]
        if failed or not replicas:
            await self._restore(slot, previous)
            detail = "; ".join(f"{r.replica_id}: {r.error or 'not loaded'}" for r in failed) or "no replica answered"
            raise server_error(f"Loading '{model}' failed ({detail}); {previous['model']} keeps serving")
        return LoadResponse(
            model=model, model_type=slot, replicas=[ReplicaView.model_validate(r.model_dump()) for r in replicas]
        )

    async def _restore(self, slot: str, previous: dict) -> None:
        # Keep the slot's desired state truthful: the previous model goes on serving.
        if previous["state"] == LOADED:
            await self.state.control_plane().call("set_desired", slot, LOADED, previous["model"])

    async def unload(self, model_type: str) -> UnloadResponse:
        slots = list(self.state.catalog.slots) if model_type == "all" else [model_type]
        for slot in slots:
            self.check_slot(slot)
        control = self.state.control_plane()
        results: dict[str, list[dict]] = {}
        for slot in slots:
            desired = await control.call("set_desired", slot, UNLOADED, None)
            replicas = await control.call("wait_applied", slot, desired.epoch, UNLOAD_TIMEOUT_S)
            results[slot] = [{"replica_id": r.replica_id, "freed_bytes": r.freed_bytes or 0} for r in replicas]
        return UnloadResponse(unloaded=results)

    async def clear_prompt_cache(self) -> dict[str, Any]:
        """POST /v1/models/cache/clear: the LLM replica that answers empties the prompt cache's
        disk tier of the models it holds, on its node (the node's replicas share it:
        deployments/llm/disk_cache.py); RAM tiers age out by themselves."""
        return await self.state.slot("llm").call("clear_prompt_cache")

    def models_dirs(self) -> dict[str, Optional[str]]:
        return {slot: spec.models_dir for slot, spec in self.state.catalog.slots.items() if spec.models_dir}

    async def report(self) -> dict[str, Any]:
        """GET /v1/models/report: what the slots' models directories hold on this node's disk,
        each model under the slot whose model types it has (a scan: off the event loop)."""
        from deployments.control.report import disk_report

        return await asyncio.to_thread(disk_report, self.models_dirs(), SLOTS.values())
