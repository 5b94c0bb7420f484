"""Operating the slots at runtime: readiness, per-replica status, load/unload, disk report,
version and capabilities (OminiX-API's /readyz, /v1/models/status|load|unload|report, /version).

Every operation acts on all replicas of a slot through the Control deployment and reports
per replica; see deployments/control/.
"""

from __future__ import annotations

import asyncio
from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import AliasChoices, BaseModel, Field

from deployments import SERVICE_NAME, __version__
from deployments.control.capabilities import registry
from deployments.control.state import LOADED, UNLOADED
from deployments.ingress.cuda import NOT_CONFIGURED_STATUS, cuda_status
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request, server_error, unavailable

router = APIRouter(tags=["model management"])

LOAD_TIMEOUT_S = 300.0
UNLOAD_TIMEOUT_S = 30.0


class LoadRequest(BaseModel):
    model: str = Field(..., min_length=1, validation_alias=AliasChoices("model", "model_id"))
    model_type: str = "llm"


class UnloadRequest(BaseModel):
    model_type: str


async def _control_status(state: IngressState) -> dict:
    if state.control is None:
        raise unavailable("This graph has no control plane")
    return await asyncio.wait_for(state.control.status.remote(), 10)


def _check_slot(state: IngressState, slot: str) -> None:
    if slot not in state.catalog.slots:
        served = ", ".join(state.catalog.slots) or "none"
        raise invalid_request(f"Unknown model_type: {slot}. This graph serves: {served}", "model_type")


def _replica_view(report: dict) -> dict:
    keys = ("replica_id", "default_model", "loaded_models", "memory", "freed_bytes", "error", "loading", "blas")
    return {k: report.get(k) for k in keys}


@router.get("/readyz")
async def readyz(state: IngressState = Depends(ingress_state)):
    """200 once every slot under the control plane has a replica serving its default model and,
    when a CUDA route is configured, its worker is ready (live probe); else 503 with reasons."""
    slots, ready = await _slot_readiness(state)
    cuda = await cuda_status(state)
    if cuda is not None:
        ready = ready and cuda["model_ready"]
    body = {"status": "ready" if ready else "not_ready", "slots": slots, "sglang_cuda": cuda or {"configured": False}}
    return JSONResponse(body, status_code=200 if ready else 503)


async def _slot_readiness(state: IngressState) -> tuple[dict, bool]:
    try:
        status = await _control_status(state)
    except Exception as e:
        return {"control": {"ready": False, "reason": f"control plane: {e}"}}, False
    slots, ready = {}, True
    for slot, info in status.items():
        desired = info["desired"]
        serving = [r for r in info["replicas"] if desired["state"] == LOADED and r["default_model"] == desired["model"]]
        if serving:
            slots[slot] = {"ready": True, "model": desired["model"], "replicas": len(serving)}
        else:
            ready = False
            reason = "unloaded by an operator" if desired["state"] == UNLOADED else f"no replica has loaded {desired['model']} yet"
            slots[slot] = {"ready": False, "reason": reason}
    return slots, ready


@router.get("/v1/models/status")
async def models_status(state: IngressState = Depends(ingress_state)):
    status = await _control_status(state)
    slots = {
        slot: {
            "default_model": info["desired"]["model"] if info["desired"]["state"] == LOADED else None,
            "state": info["desired"]["state"],
            "replicas": [_replica_view(r) for r in info["replicas"]],
        }
        for slot, info in status.items()
    }
    return {
        "status": "success",
        # OminiX-API's shape: slot -> its default model.
        "models": {slot: info["default_model"] for slot, info in slots.items()},
        "slots": slots,
        "sglang_cuda": await cuda_status(state) or NOT_CONFIGURED_STATUS,
    }


@router.post("/v1/models/load")
async def load_model(request: LoadRequest, state: IngressState = Depends(ingress_state)):
    slot = request.model_type
    _check_slot(state, slot)
    model = state.catalog.canonical(slot, request.model)  # OminiX-API's `flux` / `zimage`
    state.catalog.check_loadable(slot, model)
    previous = (await _control_status(state))[slot]["desired"]
    desired = await state.control.set_desired.remote(slot, LOADED, model)
    replicas = await state.control.wait_applied.remote(slot, desired.epoch, LOAD_TIMEOUT_S)
    failed = [r for r in replicas if r.error or r.default_model != model]
    if failed or not replicas:
        # Keep the slot's desired state truthful: the previous model goes on serving.
        if previous["state"] == LOADED:
            await state.control.set_desired.remote(slot, LOADED, previous["model"])
        detail = "; ".join(f"{r.replica_id}: {r.error or 'not loaded'}" for r in failed) or "no replica answered"
        raise server_error(f"Loading '{model}' failed ({detail}); {previous['model']} keeps serving")
    return {
        "status": "success",
        "model": model,
        "model_type": slot,
        "replicas": [_replica_view(r.model_dump()) for r in replicas],
    }


@router.post("/v1/models/unload")
async def unload_model(request: UnloadRequest, state: IngressState = Depends(ingress_state)):
    slots = list(state.catalog.slots) if request.model_type == "all" else [request.model_type]
    for slot in slots:
        _check_slot(state, slot)
    results = {}
    for slot in slots:
        desired = await state.control.set_desired.remote(slot, UNLOADED, None)
        replicas = await state.control.wait_applied.remote(slot, desired.epoch, UNLOAD_TIMEOUT_S)
        results[slot] = [{"replica_id": r.replica_id, "freed_bytes": r.freed_bytes or 0} for r in replicas]
    return {"status": "success", "unloaded": results}


@router.get("/v1/models/report")
async def models_report(state: IngressState = Depends(ingress_state)):
    from deployments.control.report import disk_report

    dirs = {slot: spec.models_dir for slot, spec in state.catalog.slots.items() if spec.models_dir}
    return await asyncio.to_thread(disk_report, dirs)


@router.get("/v1/version")
@router.get("/version")
async def version_info(state: IngressState = Depends(ingress_state)):
    capabilities = registry(state.catalog.slots)
    loaded: list[dict] = []
    try:
        for slot, info in (await _control_status(state)).items():
            models = {m for r in info["replicas"] for m in r["loaded_models"]}
            loaded += [{"model": m, "model_type": slot} for m in sorted(models)]
    except Exception:
        pass
    return {"ominix_serve": __version__, "service": SERVICE_NAME, "capabilities": capabilities, "models_loaded": loaded}
