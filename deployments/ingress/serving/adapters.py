"""LoRA adapters loaded and unloaded at run time (vLLM's POST /v1/load_lora_adapter and
/v1/unload_lora_adapter), and the ingress's copy of them, by which `model` names an adapter.

A load is checked on one LLM replica first (the adapter's files found, read and checked to fit
the model it runs on: deployments/llm/deployment.py `check_adapter`), then kept by Control
(deployments/control/state.py), which every LLM replica follows (each loads the adapter on its
first request for it) and every ingress replica reads. As in vLLM: a name already taken, a
missing name or path, or files that are no adapter of that model are a 400; unloading a name
that was not loaded at run time is a 404; success is a 200 with a line of text.

The ingress that served a load or an unload knows at once; the others read Control's list when
a request names a model they do not know (misses at once share one read) and whenever
/v1/models is listed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, invalid_request

SLOT = "llm"
CHECK_TIMEOUT_S = 300.0  # the check may load the model the adapter runs on


def take_runtime_adapters(state: IngressState, adapters: dict[str, dict]) -> None:
    """Control's run-time adapters ({name: {path, base}}) as the catalog's {name: base}."""
    spec = state.catalog.slots.get(SLOT)
    if spec is not None:
        spec.runtime_adapters = {name: entry["base"] for name, entry in adapters.items()}


class AdapterDirectory:
    """The run-time adapters as this ingress knows them, read again from Control on a miss."""

    def __init__(self, state: IngressState):
        self.state = state
        self._covered = float("-inf")  # when the last good read of Control's list began
        self._lock = asyncio.Lock()

    async def refresh(self) -> bool:
        """Read Control's list: whether this ingress's copy is now at least as new as this call.
        Misses at once share a read: one that began after them answers for them all, so Control
        gets one read in flight per ingress replica, however many unknown names arrive."""
        if self.state.control is None or SLOT not in self.state.catalog.slots:
            return False
        missed = time.monotonic()
        async with self._lock:
            if self._covered >= missed:
                return True
            began = time.monotonic()
            try:
                desired = await self.state.control.call("desired", SLOT)
            except Exception:  # Control away: the request is answered as without the refresh
                return False
            self._covered = began
        take_runtime_adapters(self.state, _field(desired, "adapters") or {})
        return True


def _field(desired: Any, name: str) -> Any:
    return desired.get(name) if isinstance(desired, dict) else getattr(desired, name, None)


async def resolve_model(state: IngressState, slot: str, model: Optional[str]) -> Optional[str]:
    """`state.catalog.resolve`, with the LLM slot's run-time adapters read again from Control
    when `model` is unknown here (another ingress replica loaded it)."""
    try:
        return state.catalog.resolve(slot, model)
    except APIError as e:
        if slot != SLOT or not model or e.status_code != 404 or not await state.adapter_directory().refresh():
            raise
    return state.catalog.resolve(slot, model)


class ServingAdapters:
    def __init__(self, state: IngressState):
        self.state = state

    async def load(self, name: str, path: str, base: Optional[str]) -> str:
        catalog = self.state.catalog
        client = self.state.slot(SLOT)  # a graph without the LLM slot answers slot_disabled
        await self.state.adapter_directory().refresh()
        if catalog.taken(SLOT, name):
            raise invalid_request(
                f"The lora adapter '{name}' has already been loaded, or the name is a model's or an alias; "
                "unload it first or choose another name",
                "lora_name",
                "adapter_exists",
            )
        control = self.state.control_plane()
        if base is None:
            desired = await control.call("desired", SLOT)
            base = _field(desired, "model")
            if base is None:
                raise invalid_request("base_model_name: the LLM slot has no model loaded to run the adapter on")
        else:
            base = catalog.canonical(SLOT, base)
            try:
                catalog.check_loadable(SLOT, base)
            except APIError as e:
                raise invalid_request(f"base_model_name: {e.message}", "base_model_name") from None
        await asyncio.wait_for(client.call("check_adapter", name, path, base, model=base), CHECK_TIMEOUT_S)
        desired = await control.call("set_adapter", SLOT, name, {"path": path, "base": base})
        take_runtime_adapters(self.state, _field(desired, "adapters") or {})
        return f"Success: LoRA adapter '{name}' added successfully."

    async def unload(self, name: str) -> str:
        spec = self.state.catalog.slots.get(SLOT)
        self.state.slot(SLOT)
        await self.state.adapter_directory().refresh()
        if spec is not None and name in spec.adapters and name not in spec.runtime_adapters:
            raise invalid_request(
                f"The lora adapter '{name}' is declared in the config (llm.adapters); remove it there",
                "lora_name",
                "adapter_configured",
            )
        if spec is None or name not in spec.runtime_adapters:
            raise APIError(
                404, f"The lora adapter '{name}' cannot be found.", "invalid_request_error", "lora_name", "not_found"
            )
        desired = await self.state.control_plane().call("set_adapter", SLOT, name, None)
        take_runtime_adapters(self.state, _field(desired, "adapters") or {})
        return f"Success: LoRA adapter '{name}' removed successfully."
