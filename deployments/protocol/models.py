"""Response models of the model-management routes (OminiX-API's /v1/models/status, load,
unload), typed so their shapes are checked and documented in the OpenAPI schema."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict


class LoadedModelView(BaseModel):
    """One model a replica holds: since when, last used, and when it goes if nothing uses it
    (deployments/control/idle.py). Times are Unix seconds of the replica's clock."""

    model_config = ConfigDict(extra="ignore")

    id: str
    loaded_at: Optional[float] = None
    last_used_at: Optional[float] = None
    in_use: int = 0  # requests holding it now
    idle_unload_s: Optional[float] = None  # its idle timeout; None: never unloaded for idleness
    unload_at: Optional[float] = None  # None: not while it is used, or never


class ReplicaView(BaseModel):
    """What one replica of a slot reports: its default, what it holds, memory, errors."""

    model_config = ConfigDict(extra="ignore")

    replica_id: str
    default_model: Optional[str] = None
    loaded_models: list[str] = []
    models: list[LoadedModelView] = []  # the loaded models with their times and idle timeout
    memory: Optional[dict[str, int]] = None
    freed_bytes: Optional[int] = None
    error: Optional[str] = None
    loading: Optional[dict[str, Any]] = None  # {"model", "download": progress} while a load runs
    blas: Optional[dict[str, Any]] = None
    accelerator: Optional[dict[str, Any]] = None  # what its MLX runs on: backend, device, device_name, build
    warnings: list[str] = []  # what the replica runs without (a fast BLAS, ffmpeg), with the fix
    node: Optional[dict[str, Any]] = None  # {"id", "ip", "labels"}: where Ray placed it (docs/multi-node.md)
    # A sharded LLM replica's ranks, rank 0 (the replica) first: {"rank", "node_id", "ip", "port"}
    ranks: Optional[list[dict[str, Any]]] = None
    serve_state: Optional[str] = None  # Serve's state of it (RUNNING: requests reach it; STARTING...)


class SlotStatus(BaseModel):
    default_model: Optional[str]  # None while unloaded by an operator
    state: str
    replicas: list[ReplicaView]
    keep_alive: dict[str, float] = {}  # model -> the last request's keep_alive in seconds (-1: for ever)


class ModelsStatus(BaseModel):
    status: Literal["success"] = "success"
    models: dict[str, Optional[str]]  # OminiX-API's shape: slot -> its default model
    slots: dict[str, SlotStatus]
    sglang_cuda: dict[str, Any]


class LoadResponse(BaseModel):
    status: Literal["success"] = "success"
    model: str
    model_type: str
    replicas: list[ReplicaView]


class UnloadResponse(BaseModel):
    status: Literal["success"] = "success"
    unloaded: dict[str, list[dict[str, Any]]]  # slot -> [{replica_id, freed_bytes}]
