"""OminiX-API's model catalog and downloads on the ingress: which ids may be downloaded (the
catalog's: built-ins excepted), refusals in OminiX-API's statuses, and removal of a model no
slot serves. The downloads themselves run on the DownloadManager's thread (deployments/downloads).
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from typing import Any, Optional

from deployments.downloads.catalog import cached_repos, catalog
from deployments.ingress.serving.models import ServingModels
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError
from deployments.slots import SLOTS


def _conflict(message: str, code: str) -> APIError:
    return APIError(409, message, "conflict_error", "model_id", code)


class ModelDownloads:
    def __init__(self, state: IngressState):
        self.state = state
        self.manager = state.download_manager()

    async def entries(self) -> list[dict[str, Any]]:
        allowed = {slot: spec.models for slot, spec in self.state.catalog.slots.items()}
        builtins = {slot: list(SLOTS[slot].builtins) for slot in self.state.catalog.slots}
        return await asyncio.to_thread(catalog, allowed, builtins, self.manager.cache_dir)

    async def entry(self, model_id: str) -> dict[str, Any]:
        """The catalog entry of an id this server may download or remove; 403 for any other."""
        for entry in await self.entries():
            if entry["id"] == model_id:
                if entry["status"] == "builtin":
                    raise _conflict(
                        f"Model '{model_id}' is built in: it is generated locally, never downloaded", "builtin_model"
                    )
                return entry
        raise APIError(
            403,
            f"Model '{model_id}' is not in this server's catalog (GET /v1/models/catalog): only the models "
            "its slots allow or the docs recommend may be downloaded",
            "forbidden",
            "model_id",
            "model_not_allowed",
        )

    async def download(self, model_id: str) -> dict[str, Any]:
        entry = await self.entry(model_id)
        if self.manager.active(model_id):
            raise _conflict(f"Download already in progress for '{model_id}'", "download_in_progress")
        if entry["status"] == "ready":
            raise _conflict(f"Model '{model_id}' is already downloaded", "already_downloaded")
        task = self.manager.start(model_id)
        return {"task_id": task.task_id, "model_id": model_id, "status": "accepted", "message": "Download started"}

    def progress(self, model_id: Optional[str]) -> AsyncIterator[dict | None]:
        """The watched downloads' states (all of them without `model_id`), the current one first."""
        return self.manager.watch(model_id)

    def cancel(self, model_id: str) -> dict[str, Any]:
        if not self.manager.cancel(model_id):
            raise APIError(
                404, f"No active download for model: {model_id}", "not_found_error", "model_id", "no_download"
            )
        return {"status": "success", "message": f"Download cancellation requested for '{model_id}'"}

    async def remove(self, model_id: str) -> dict[str, Any]:
        entry = await self.entry(model_id)
        if self.manager.active(model_id):
            raise _conflict(f"Model '{model_id}' is being downloaded: cancel it first", "download_in_progress")
        serving = await self._serving()
        if model_id in serving:
            raise _conflict(
                f"Model '{model_id}' is served by the {serving[model_id]} slot: unload it (or load another "
                "model) first",
                "model_in_use",
            )
        path = (entry.get("storage") or {}).get("local_path")
        if entry["status"] != "ready" or not path:
            raise APIError(404, f"Model '{model_id}' is not on disk", "not_found_error", "model_id", "model_not_found")
        await asyncio.to_thread(shutil.rmtree, path)
        return {"status": "success", "message": f"Removed model '{model_id}' from: {path}"}

    async def _serving(self) -> dict[str, str]:
        """model id -> the slot that serves it: each slot's configured default and what its
        replicas have loaded."""
        serving = {spec.default: slot for slot, spec in self.state.catalog.slots.items()}
        for slot, models in (await ServingModels(self.state).loaded()).items():
            serving.update(dict.fromkeys(models, slot))
        return serving

    async def scan(self) -> dict[str, Any]:
        repos = await asyncio.to_thread(cached_repos, self.manager.cache_dir)
        listed = {e["id"] for e in await self.entries()}
        found = sorted(set(repos) & listed)
        return {
            "status": "success",
            "models_added": len(found),
            "models": found,
            "message": f"Scan complete, {len(found)} catalog model(s) on disk",
        }
