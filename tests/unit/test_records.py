"""The graph's record store alone (pure): versions and conditional writes, the bounds of a
namespace (entries, bytes, age; least recently used out first), the file across a restart."""

from __future__ import annotations

import pytest

from deployments.records import RecordConflict, RecordLimits, RecordStore, RecordTooLarge, UnknownNamespace


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def store(tmp_path=None, clock=None, **limits) -> RecordStore:
    bounds = {"max_entries": 3, "max_bytes": 10_000, "max_age_s": 60.0, **limits}
    return RecordStore(tmp_path / "r.sqlite3" if tmp_path else None, {"ns": RecordLimits(**bounds)}, clock or Clock())


def test_put_get_delete_and_versions():
    s = store()
    assert s.get("ns", "a") is None
    assert s.put("ns", "a", {"x": 1}) == 1
    assert s.put("ns", "a", {"x": 2}) == 2
    record = s.get("ns", "a")
    assert record.value == {"x": 2} and record.version == 2 and record.key == "a"
    assert s.delete("ns", "a") and s.get("ns", "a") is None and not s.delete("ns", "a")


def test_conditional_writes_refuse_a_moved_record():
    s = store()
    assert s.put("ns", "lock", {"owner": 1}, expected_version=0) == 1
    with pytest.raises(RecordConflict):
        s.put("ns", "lock", {"owner": 2}, expected_version=0)  # only if absent: it is not
    assert s.put("ns", "lock", {"owner": 2}, expected_version=1) == 2
    with pytest.raises(RecordConflict):
        s.put("ns", "lock", {"owner": 3}, expected_version=1)
    assert s.get("ns", "lock").value == {"owner": 2}


def test_the_least_recently_used_record_goes_first():
    s = store()
    for key in "abc":
        s.put("ns", key, {"k": key})
        s._clock.t += 1
    s.get("ns", "a")  # a read is a use: "b" is now the least recently used
    s._clock.t += 1
    s.put("ns", "d", {"k": "d"})
    assert [r.key for r in s.list("ns")] and s.get("ns", "b") is None
    assert {k for k in "acd" if s.get("ns", k)} == {"a", "c", "d"}
    assert s.usage("ns")["entries"] == 3


def test_the_byte_bound_evicts_and_one_oversized_record_is_refused():
    s = store(max_entries=100, max_bytes=100)
    s.put("ns", "a", {"v": "x" * 40})
    s._clock.t += 1
    s.put("ns", "b", {"v": "y" * 40})
    s._clock.t += 1
    s.put("ns", "c", {"v": "z" * 40})  # three would be over 100 bytes: "a" goes
    assert s.get("ns", "a") is None and s.get("ns", "c") is not None
    assert s.usage("ns")["bytes"] <= 100
    with pytest.raises(RecordTooLarge):
        s.put("ns", "big", {"v": "x" * 200})
    assert s.get("ns", "big") is None


def test_records_expire_after_their_max_age():
    clock = Clock()
    s = store(clock=clock)
    s.put("ns", "old", {})
    clock.t += 30
    s.put("ns", "young", {})
    clock.t += 31  # "old" was written 61 s ago
    assert s.get("ns", "old") is None and s.get("ns", "young") is not None
    assert [r.key for r in s.list("ns")] == ["young"]
    assert not s.delete("ns", "old")
    assert s.put("ns", "old", {}, expected_version=0) == 1  # an expired record is absent


def test_list_is_newest_first_and_namespaces_are_declared():
    clock = Clock()
    s = store(clock=clock)
    for key in ("a", "b"):
        s.put("ns", key, {})
        clock.t += 1
    assert [r.key for r in s.list("ns")] == ["b", "a"]
    with pytest.raises(UnknownNamespace):
        s.get("other", "a")


def test_the_file_keeps_records_across_a_restart_and_a_damaged_one_starts_empty(tmp_path):
    s = store(tmp_path)
    s.put("ns", "a", {"kept": True})
    s.close()
    assert store(tmp_path).get("ns", "a").value == {"kept": True}
    (tmp_path / "r.sqlite3").write_bytes(b"not a database at all" * 100)
    for extra in ("-wal", "-shm"):
        (tmp_path / f"r.sqlite3{extra}").unlink(missing_ok=True)
    fresh = store(tmp_path)
    assert fresh.get("ns", "a") is None
    fresh.put("ns", "b", {})
    assert (tmp_path / "r.sqlite3.damaged").exists()


class ServiceControl:
    """What the ingress's ControlRecords calls: Control's record methods, here the service itself."""

    def __init__(self, service):
        self.service = service

    async def call(self, method, *args, model=None, session=None):
        return await getattr(self.service, method)(*args)


async def test_controls_service_and_the_ingress_client_agree_on_refusals():
    from deployments.ingress.serving.records import ControlRecords
    from deployments.protocol.errors import APIError
    from deployments.records import RecordService

    records = ControlRecords(ServiceControl(RecordService(store(max_bytes=100))))
    assert records.shared and await records.put("ns", "a", {"v": 1}, 0) == 1
    assert (await records.get("ns", "a")).value == {"v": 1} and [r.key for r in await records.list("ns")] == ["a"]
    with pytest.raises(RecordConflict):
        await records.put("ns", "a", {"v": 2}, 0)
    with pytest.raises(RecordTooLarge):
        await records.put("ns", "b", {"v": "x" * 200})
    with pytest.raises(APIError) as info:  # a programming error, not the store's refusal: stays an APIError
        await records.get("other", "a")
    assert info.value.code == "unknown_namespace"
    assert await records.delete("ns", "a") and await records.get("ns", "a") is None
