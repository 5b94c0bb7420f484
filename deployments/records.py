"""The graph's record store: JSON records that a protocol keeps across requests (stored
responses and conversations of the Responses API, voice-training jobs), bounded per namespace in entries, bytes
and age, least recently used first out. Pure: no Ray, no MLX.

Control holds one (deployments/control/deployment.py), so every ingress replica sees the same
records and they outlive any ingress replica; its SQLite file under Control's cache directory
keeps them across a Control restart on the same node. An ingress built without Control (tests,
`create_app` alone) keeps a private one in its state directory.

A record has a version, bumped on every write: a writer that must not overwrite someone
else's change (starting the one training job) writes with `expected_version` (0: only if
absent) and gets `RecordConflict` when the record moved on.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from deployments.protocol.errors import APIError

MiB = 1024 * 1024
DAY_S = 24 * 3600.0


@dataclass(frozen=True)
class RecordLimits:
    """What one namespace may hold; past a bound the least recently used records go first."""

    max_entries: int
    max_bytes: int
    max_age_s: float  # since the record was last written
    max_record_bytes: Optional[int] = None  # one record; None: max_bytes

    def record_cap(self) -> int:
        return min(self.max_bytes, self.max_record_bytes or self.max_bytes)


# OpenAI keeps a stored response for 30 days; entries and bytes keep Control's disk bounded.
# A conversation has no expiry at OpenAI: here one unwritten for a year goes, and the least
# recently used go first past the entries and bytes.
RESPONSES = "responses"
CONVERSATIONS = "conversations"
VOICE_TRAINING = "voice_training"
DEFAULT_LIMITS = {
    RESPONSES: RecordLimits(max_entries=10_000, max_bytes=512 * MiB, max_age_s=30 * DAY_S, max_record_bytes=32 * MiB),
    CONVERSATIONS: RecordLimits(
        max_entries=10_000, max_bytes=512 * MiB, max_age_s=365 * DAY_S, max_record_bytes=32 * MiB
    ),
    VOICE_TRAINING: RecordLimits(max_entries=1_000, max_bytes=16 * MiB, max_age_s=30 * DAY_S),
}


class RecordConflict(Exception):
    """A conditional write found another version than the one it expected."""


class RecordTooLarge(Exception):
    """One record over its namespace's byte bound: it could never be kept."""


class UnknownNamespace(KeyError):
    pass


@dataclass(frozen=True)
class Record:
    key: str
    value: dict[str, Any]
    version: int
    updated_at: float

    def as_dict(self) -> dict[str, Any]:
        """What crosses a handle: plain data."""
        return {"key": self.key, "value": self.value, "version": self.version, "updated_at": self.updated_at}


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    size INTEGER NOT NULL,
    version INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    used_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS records_used ON records (namespace, used_at);
"""


class RecordStore:
    """Namespaced JSON records in SQLite: a file (kept across restarts) or memory (`path` None)."""

    def __init__(
        self,
        path: Optional[Path] = None,
        limits: Optional[dict[str, RecordLimits]] = None,
        clock: Callable[[], float] = time.time,
    ):
        self.limits = dict(DEFAULT_LIMITS if limits is None else limits)
        self.path = Path(path) if path is not None else None
        self._clock = clock
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        if self.path is None:
            return self._connect(":memory:")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect(str(self.path))
        except sqlite3.DatabaseError:  # not a database (a damaged file): start over, keep it aside
            self.path.replace(self.path.with_suffix(self.path.suffix + ".damaged"))
            return self._connect(str(self.path))

    @staticmethod
    def _connect(where: str) -> sqlite3.Connection:
        db = sqlite3.connect(where, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        return db

    def _limits(self, namespace: str) -> RecordLimits:
        try:
            return self.limits[namespace]
        except KeyError:
            raise UnknownNamespace(namespace) from None

    # ------------------------------------------------------------------ reads

    def get(self, namespace: str, key: str) -> Optional[Record]:
        """The record, or None when absent or expired; a read counts as a use (LRU)."""
        limits = self._limits(namespace)
        now = self._clock()
        with self._lock:
            row = self._db.execute(
                "SELECT value, version, updated_at FROM records WHERE namespace=? AND key=?", (namespace, key)
            ).fetchone()
            if row is None:
                return None
            if row[2] < now - limits.max_age_s:
                self._db.execute("DELETE FROM records WHERE namespace=? AND key=?", (namespace, key))
                return None
            self._db.execute("UPDATE records SET used_at=? WHERE namespace=? AND key=?", (now, namespace, key))
        return Record(key, json.loads(row[0]), row[1], row[2])

    def list(self, namespace: str) -> list[Record]:
        """The namespace's live records, most recently written first (no use is counted)."""
        limits = self._limits(namespace)
        with self._lock:
            rows = self._db.execute(
                "SELECT key, value, version, updated_at FROM records WHERE namespace=? AND updated_at>=? "
                "ORDER BY updated_at DESC",
                (namespace, self._clock() - limits.max_age_s),
            ).fetchall()
        return [Record(key, json.loads(value), version, updated) for key, value, version, updated in rows]

    def usage(self, namespace: str) -> dict[str, int]:
        """How much the namespace holds now (entries, bytes)."""
        self._limits(namespace)
        with self._lock:
            count, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM records WHERE namespace=?", (namespace,)
            ).fetchone()
        return {"entries": count, "bytes": size}

    # ------------------------------------------------------------------ writes

    def put(self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None) -> int:
        """Write the record; its new version. `expected_version`: write only over that version
        (0: only when there is no live record), else `RecordConflict`."""
        limits = self._limits(namespace)
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        size = len(text.encode())
        if size > limits.record_cap():
            raise RecordTooLarge(f"{size} bytes; a {namespace} record holds at most {limits.record_cap()}")
        now = self._clock()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._expire(namespace, limits, now)
                row = self._db.execute(
                    "SELECT version FROM records WHERE namespace=? AND key=?", (namespace, key)
                ).fetchone()
                current = row[0] if row else 0
                if expected_version is not None and current != expected_version:
                    raise RecordConflict(f"{namespace}/{key} is at version {current}, not {expected_version}")
                self._db.execute(
                    "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (namespace, key, text, size, current + 1, now, now),
                )
                self._evict(namespace, limits, keep=key)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return current + 1

    def delete(self, namespace: str, key: str) -> bool:
        """Remove the record; whether there was a live one."""
        limits = self._limits(namespace)
        with self._lock:
            deleted = self._db.execute(
                "DELETE FROM records WHERE namespace=? AND key=? AND updated_at>=?",
                (namespace, key, self._clock() - limits.max_age_s),
            ).rowcount
            self._db.execute("DELETE FROM records WHERE namespace=? AND key=?", (namespace, key))
        return deleted > 0

    def _expire(self, namespace: str, limits: RecordLimits, now: float) -> None:
        self._db.execute("DELETE FROM records WHERE namespace=? AND updated_at<?", (namespace, now - limits.max_age_s))

    def _evict(self, namespace: str, limits: RecordLimits, keep: str) -> None:
        """Least recently used first, until the namespace is within its bounds (never `keep`,
        the record just written: it fits alone)."""
        count, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM records WHERE namespace=?", (namespace,)
        ).fetchone()
        if count <= limits.max_entries and size <= limits.max_bytes:
            return
        victims = self._db.execute(
            "SELECT key, size FROM records WHERE namespace=? AND key<>? ORDER BY used_at, updated_at",
            (namespace, keep),
        ).fetchall()
        gone = []
        for victim, victim_size in victims:
            if count <= limits.max_entries and size <= limits.max_bytes:
                break
            gone.append(victim)
            count, size = count - 1, size - victim_size
        self._db.executemany("DELETE FROM records WHERE namespace=? AND key=?", [(namespace, k) for k in gone])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RecordService:
    """The store as Control serves it to the ingress replicas (deployments/ingress/serving/
    records.py): plain data across the handle, the store's refusals as APIErrors whose code the
    caller turns back into the store's exceptions. SQLite runs off the event loop (a large
    record takes milliseconds; Control's loop also answers every slot replica's long poll)."""

    def __init__(self, store: RecordStore):
        self.store = store

    async def record_get(self, namespace: str, key: str) -> Optional[dict[str, Any]]:
        record = await self._call(self.store.get, namespace, key)
        return None if record is None else record.as_dict()

    async def record_list(self, namespace: str) -> list[dict[str, Any]]:
        return [record.as_dict() for record in await self._call(self.store.list, namespace)]

    async def record_put(
        self, namespace: str, key: str, value: dict[str, Any], expected_version: Optional[int] = None
    ) -> int:
        return await self._call(self.store.put, namespace, key, value, expected_version)

    async def record_delete(self, namespace: str, key: str) -> bool:
        return await self._call(self.store.delete, namespace, key)

    @staticmethod
    async def _call(method, *args):
        try:
            return await asyncio.to_thread(method, *args)
        except RecordConflict as e:
            raise APIError(409, str(e), "conflict_error", code="record_conflict") from None
        except RecordTooLarge as e:
            raise APIError(413, str(e), "invalid_request_error", code="record_too_large") from None
        except UnknownNamespace as e:
            raise APIError(
                400, f"unknown record namespace {e}", "invalid_request_error", code="unknown_namespace"
            ) from None
