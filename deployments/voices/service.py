"""The cluster's voices as the Control deployment serves them: the store (store.py) behind a
long poll on its version, one change at a time, and refusals raised as `APIError`s like every
other error (they pickle across the handle to the TTS replica that asked).

Free of Ray: Control owns one `VoiceService` and its voice handle methods delegate to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TypeVar

from deployments.protocol.errors import APIError
from deployments.voices.store import VoiceStore, VoiceStoreError

T = TypeVar("T")


def refusal(e: VoiceStoreError) -> APIError:
    """The HTTP error of a change the store refuses."""
    return APIError(e.status, e.message, "invalid_request_error", e.param, e.code)


class VoiceService:
    """The cluster's voice registry: snapshots, files, and the changes TTS replicas ask for."""

    def __init__(self, root: Path):
        self.store = VoiceStore(root)
        self._changed = asyncio.Event()
        self._lock = asyncio.Lock()  # one change at a time: each is a disk write

    async def snapshot(self, version: int = -1, store: Optional[str] = None, timeout_s: float = 0.0) -> dict[str, Any]:
        """The registry's snapshot; a long poll while it is still at `version` of `store`."""
        snapshot = self.store.snapshot()
        if snapshot["store"] == store and snapshot["version"] <= version and timeout_s > 0:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout_s)
            except TimeoutError:
                pass
            snapshot = self.store.snapshot()
        return snapshot

    async def read_file(self, key: str) -> bytes:
        try:
            return await asyncio.to_thread(self.store.read_file, key)
        except VoiceStoreError as e:
            raise refusal(e) from None

    async def add_files(self, files: dict[str, bytes]) -> dict[str, Any]:
        """{"keys": {file name: key}}: a voice put next refers to its files by these keys."""
        return {"keys": await self._change(self.store.add_files, files)}

    async def put(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a voice; the snapshot that has it."""
        return await self._change(self.store.put, name, entry)

    async def remove(self, name: str) -> dict[str, Any]:
        """{"removed": the voice's entry, or None when the store has no such voice}."""
        return {"removed": await self._change(self.store.remove, name)}

    async def _change(self, change: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            try:
                result = await asyncio.to_thread(change, *args)
            except VoiceStoreError as e:
                raise refusal(e) from None
        event, self._changed = self._changed, asyncio.Event()
        event.set()  # wake every long poll; later ones wait on the fresh event
        return result
