"""The graph's record store as the ingress reaches it: Control's (shared by every ingress
replica, kept across their restarts) or, for an ingress built without Control (tests), a private
one in its state directory. Both answer the same async calls and raise the store's own
exceptions (deployments/records.py), so what keeps records (stored responses, voice
training) never asks which one it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, Protocol

from deployments.protocol.errors import APIError
from deployments.records import Record, RecordConflict, RecordStore, RecordTooLarge

RECORDS_FILE = "records.sqlite3"


class Records(Protocol):
    # Whether other processes write the same records (then a job another process runs may be
    # alive: its heartbeat says so), or this process alone does.
    shared: bool

    async def get(self, namespace: str, key: str) -> Optional[Record]: ...

    async def list(self, namespace: str) -> list[Record]: ...

    async def put(
        self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None
    ) -> int: ...

    async def delete(self, namespace: str, key: str) -> bool: ...


class LocalRecords:
    """A private store, in this process (its SQLite writes are small: on the event loop)."""

    shared = False

    def __init__(self, store: RecordStore):
        self.store = store

    @classmethod
    def in_dir(cls, state_dir: Path) -> LocalRecords:
        return cls(RecordStore(Path(state_dir) / RECORDS_FILE))

    async def get(self, namespace: str, key: str) -> Optional[Record]:
        return self.store.get(namespace, key)

    async def list(self, namespace: str) -> list[Record]:
        return self.store.list(namespace)

    async def put(self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None) -> int:
        return self.store.put(namespace, key, value, expected_version)

    async def delete(self, namespace: str, key: str) -> bool:
        return self.store.delete(namespace, key)


class ControlRecords:
    """Control's store, through its deployment client."""

    shared = True

    def __init__(self, control: Any):
        self.control = control

    async def get(self, namespace: str, key: str) -> Optional[Record]:
        raw = await self.control.call("record_get", namespace, key)
        return None if raw is None else Record(**raw)

    async def list(self, namespace: str) -> list[Record]:
        return [Record(**raw) for raw in await self.control.call("record_list", namespace)]

    async def put(self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None) -> int:
        try:
            return await self.control.call("record_put", namespace, key, value, expected_version)
        except APIError as e:
            if e.code == "record_conflict":
                raise RecordConflict(e.message) from None
            if e.code == "record_too_large":
                raise RecordTooLarge(e.message) from None
            raise

    async def delete(self, namespace: str, key: str) -> bool:
        return await self.control.call("record_delete", namespace, key)


async def edit_record(
    records: Records,
    namespace: str,
    key: str,
    change: Callable[[dict[str, Any]], Optional[dict[str, Any]]],
    missing: Callable[[], APIError],
) -> dict[str, Any]:
    """The record's value changed by `change` (which returns the new value, or None to leave it
    as it is) and written at the version read, read again when another writer came first; the
    value as it stands after. `missing()`: the error when there is no record."""

    async def attempt() -> dict[str, Any]:
        record = await records.get(namespace, key)
        if record is None:
            raise missing()
        value = change(record.value)
        if value is None:
            return record.value
        await records.put(namespace, key, value, expected_version=record.version)
        return value

    return await retry_on_conflict(attempt)


async def retry_on_conflict(attempt, tries: int = 5):
    """`attempt()` again while a conditional write loses a race (another writer in between)."""
    for n in range(tries):
        try:
            return await attempt()
        except RecordConflict:
            if n == tries - 1:
                raise
            await asyncio.sleep(0.01 * (n + 1))
