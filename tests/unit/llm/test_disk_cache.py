"""The prompt cache's disk tier without a model (deployments/llm/disk_cache.py): keys, lookup of
the longest stored prefix, the load-or-prefill rule, the LRU budget, corrupt and truncated
files, concurrent writers, an unwritable directory and a full disk. Caches here are bytes."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from deployments.llm.disk_cache import (
    DATA,
    ENTRY,
    DiskCache,
    LoadRule,
    StoredFile,
    clear_all,
    entry_name,
    longest_stored_prefix,
    lru_victims,
    model_key,
)

MIB = 1 << 20


def save_bytes(path: str, payload: bytes) -> None:
    Path(path).write_bytes(payload)


def load_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


def tier(root: Path, budget: int = 64 * MIB, min_tokens: int = 4, key: str = "m-0", **kw) -> DiskCache:
    return DiskCache(root, key, budget, min_tokens, save_bytes, load_bytes, **kw)


def payload_of(tokens: list[int]) -> bytes:
    return bytes(t % 256 for t in tokens) * 100


# ---------------------------------------------------------------------------- keys


def _model(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "model.safetensors").write_bytes(b"w" * 64)
    return d


def test_the_model_key_changes_with_the_weights_dtype_and_template(tmp_path):
    d = _model(tmp_path)
    key = model_key("org/My Model", d, "float32", "{{ messages }}")
    assert key.startswith("org_My_Model-")
    assert key == model_key("org/My Model", d, "float32", "{{ messages }}")
    assert key != model_key("org/My Model", d, "bfloat16", "{{ messages }}")
    assert key != model_key("org/My Model", d, "float32", "{{ other }}")
    assert key != model_key("org/My Model", d, "float32", "{{ messages }}", extra="mlx-lm 9")
    (d / "model.safetensors").write_bytes(b"w" * 65)  # new weights
    assert key != model_key("org/My Model", d, "float32", "{{ messages }}")


def test_the_longest_stored_prefix_is_found_by_hash_and_length():
    prompt = list(range(100))
    names = [entry_name(prompt[:10]), entry_name(prompt[:40]), entry_name([7] * 60), entry_name(prompt[:99] + [5])]
    assert longest_stored_prefix(prompt, names) == entry_name(prompt[:40])
    assert longest_stored_prefix(prompt, names, longer_than=40) is None
    assert longest_stored_prefix(prompt[:30], names) == entry_name(prompt[:10])
    assert longest_stored_prefix([1, 2, 3], names) is None
    assert longest_stored_prefix(prompt, ["junk", "00000010-xyz"]) is None


def test_loading_is_chosen_only_when_measured_faster_than_prefilling():
    rule = LoadRule(weight=1.0)
    assert rule.worth_loading(100, 0)  # nothing measured yet: the first load measures
    assert not rule.worth_loading(100, 100)  # the RAM tier has it all already
    rule.prefilled(1000, 1.0)  # 1 ms per token
    rule.loaded(1000, 0.1)  # 0.1 ms per token
    assert rule.worth_loading(100, 0)
    assert rule.worth_loading(100, 80)  # 100 * 0.1 < 20 * 1
    assert not rule.worth_loading(100, 95)  # 100 * 0.1 > 5 * 1
    rule.prefilled(10, 1.0)  # a short prefill is mostly fixed cost: not learned from
    assert rule.prefill_s_per_token == pytest.approx(0.001)
    rule.loaded(100, 1.0)  # a slow disk: 10 ms per token
    assert not rule.worth_loading(100, 0)


def test_lru_victims_are_the_oldest_until_the_rest_fit():
    entries = [StoredFile(Path("."), name, 10, last_used) for name, last_used in [("a", 3), ("b", 1), ("c", 2)]]
    assert [v.name for v in lru_victims(entries, 30)] == []
    assert [v.name for v in lru_victims(entries, 25)] == ["b"]
    assert [v.name for v in lru_victims(entries, 10)] == ["b", "c"]
    assert [v.name for v in lru_victims(entries, 0)] == ["b", "c", "a"]


# ---------------------------------------------------------------------------- the store


def test_a_written_prefix_is_read_back_for_a_longer_prompt(tmp_path):
    cache = tier(tmp_path)
    stored = list(range(20))
    assert cache.wants(stored) and cache.offer(stored, payload_of(stored))
    cache.flush()
    assert not cache.wants(stored)  # already there
    prompt = stored + [99, 98, 97]
    name = cache.lookup(prompt)
    assert name == entry_name(stored)
    assert cache.read(name, prompt) == (payload_of(stored), 20)
    stats = cache.stats()
    assert stats["entries"] == 1 and stats["writes"] == 1 and stats["hits"] == 1 and stats["bytes"] > 2000
    assert cache.lookup([5] * 30) is None and cache.stats()["misses"] == 1
    cache.close()


def test_short_prefixes_are_not_written(tmp_path):
    cache = tier(tmp_path, min_tokens=16)
    assert not cache.wants(list(range(15)))
    assert cache.wants(list(range(16)))


def test_the_budget_evicts_the_least_recently_used(tmp_path):
    cache = tier(tmp_path, budget=5000)  # each entry ~2 kB (payload) + its tokens
    a, b, c = list(range(20)), list(range(100, 120)), list(range(200, 220))
    cache.write(a, payload_of(a))
    cache.write(b, payload_of(b))
    os.utime(cache.directory / (entry_name(a) + ENTRY), (1, 1))  # a: used long ago
    os.utime(cache.directory / (entry_name(b) + ENTRY), (2, 2))
    assert cache.read(entry_name(b), b) is not None  # b used now
    cache.write(c, payload_of(c))
    left = {e.name for e in cache.scan()}
    assert left == {entry_name(b), entry_name(c)}
    assert not (cache.directory / (entry_name(a) + DATA)).exists()
    assert cache.stats()["evicted"] == 1


def test_the_budget_spans_every_model_of_the_node(tmp_path):
    one, other = tier(tmp_path, budget=5000, key="one"), tier(tmp_path, budget=5000, key="other")
    a, b, c = list(range(20)), list(range(100, 120)), list(range(200, 220))
    one.write(a, payload_of(a))
    os.utime(one.directory / (entry_name(a) + ENTRY), (1, 1))
    other.write(b, payload_of(b))
    other.write(c, payload_of(c))
    assert {e.name for e in other.scan()} == {entry_name(b), entry_name(c)}


@pytest.mark.parametrize(
    "damage",
    [
        lambda data, entry: data.write_bytes(data.read_bytes()[:-100]),  # truncated
        lambda data, entry: data.write_bytes(b"x" + data.read_bytes()[1:]),  # a flipped byte
        lambda data, entry: entry.write_text('{"format": 1, "tok'),  # a torn entry
        lambda data, entry: data.unlink(),  # the entry without its data
    ],
    ids=["truncated", "corrupt", "torn-entry", "no-data"],
)
def test_a_damaged_entry_is_ignored_and_removed(tmp_path, damage):
    cache = tier(tmp_path)
    tokens = list(range(30))
    cache.write(tokens, payload_of(tokens))
    damage(cache.directory / (entry_name(tokens) + DATA), cache.directory / (entry_name(tokens) + ENTRY))
    assert cache.read(entry_name(tokens), tokens + [1]) is None
    assert not (cache.directory / (entry_name(tokens) + ENTRY)).exists()
    assert not (cache.directory / (entry_name(tokens) + DATA)).exists()
    assert cache.stats()["errors"] == 1 and cache.stats()["hits"] == 0


def test_an_entry_for_other_tokens_under_the_same_name_is_never_loaded(tmp_path):
    """A hash collision (forged here) is caught by comparing the stored tokens."""
    cache = tier(tmp_path)
    tokens = list(range(30))
    cache.write(tokens, payload_of(tokens))
    entry_path = cache.directory / (entry_name(tokens) + ENTRY)
    entry = json.loads(entry_path.read_text())
    entry["tokens"][5] = 999
    entry_path.write_text(json.dumps(entry))
    assert cache.read(entry_name(tokens), tokens) is None
    assert not entry_path.exists()


def test_a_load_that_fails_removes_the_entry(tmp_path):
    def load_fails(path):
        raise ValueError("not a cache")

    cache = DiskCache(tmp_path, "m", 64 * MIB, 4, save_bytes, load_fails)
    tokens = list(range(30))
    cache.write(tokens, payload_of(tokens))
    assert cache.read(entry_name(tokens), tokens) is None
    assert cache.scan() == []


def _write_in_process(root: str, tokens: list[int], barrier) -> None:
    cache = tier(Path(root))
    barrier.wait()
    for _ in range(20):
        cache.write(tokens, payload_of(tokens))
        cache.clear()  # start again: both race on every round
    cache.write(tokens, payload_of(tokens))


def test_two_processes_writing_the_same_prefix_leave_one_good_entry(tmp_path):
    tokens = list(range(50))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_write_in_process, args=(str(tmp_path), tokens, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = tier(tmp_path)
    assert cache.read(entry_name(tokens), tokens) == (payload_of(tokens), 50)
    assert sorted(os.listdir(cache.directory)) == sorted([entry_name(tokens) + DATA, entry_name(tokens) + ENTRY])


def test_two_threads_writing_and_reading_at_once_never_read_a_bad_entry(tmp_path):
    writer, reader = tier(tmp_path), tier(tmp_path)
    tokens = list(range(40))
    bad = []

    def write():
        for _ in range(50):
            writer.write(tokens, payload_of(tokens))
            writer.clear()

    def read():
        for _ in range(200):
            got = reader.read(entry_name(tokens), tokens)
            if got is not None and got[0] != payload_of(tokens):
                bad.append(got)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [] and reader.stats()["errors"] == 0


def test_an_unwritable_directory_turns_the_tier_off_with_a_warning(tmp_path, caplog):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache dir should be")  # unwritable even for root
    cache = tier(blocker / "prompt-cache")
    assert not cache.enabled and not cache.wants(list(range(30)))
    assert cache.lookup(list(range(30))) is None and cache.stats()["enabled"] is False
    assert "not writable" in caplog.text


def test_a_tier_with_no_budget_is_off(tmp_path):
    cache = tier(tmp_path, budget=0)
    assert not cache.enabled and not cache.offer(list(range(30)), b"x")


def test_a_full_disk_stops_the_writes_with_one_warning_and_reads_go_on(tmp_path, caplog):
    written = []

    def save_until_full(path, payload):
        if written:
            raise OSError(28, "No space left on device")
        written.append(path)
        Path(path).write_bytes(payload)

    cache = DiskCache(tmp_path, "m", 64 * MIB, 4, save_until_full, load_bytes)
    first, second, third = list(range(10)), list(range(20, 30)), list(range(40, 50))
    cache.offer(first, payload_of(first))
    cache.offer(second, payload_of(second))
    cache.flush()
    assert not cache.offer(third, payload_of(third)) and not cache.writing
    assert caplog.text.count("stops writing") == 1
    assert cache.read(entry_name(first), first) is not None  # still serving from disk
    assert [n for n in os.listdir(cache.directory) if ".tmp-" in n] == []  # no debris left
    cache.close()


def test_a_full_queue_drops_writes_instead_of_blocking(tmp_path):
    gate = threading.Event()

    def slow_save(path, payload):
        gate.wait(10)
        Path(path).write_bytes(payload)

    cache = DiskCache(tmp_path, "m", 64 * MIB, 4, slow_save, load_bytes, queue_size=1)
    offered = [cache.offer(list(range(i, i + 10)), b"x") for i in range(0, 50, 10)]
    gate.set()
    cache.flush()
    assert offered.count(False) >= 3 and cache.stats()["dropped"] == offered.count(False)
    cache.close()


def test_clear_removes_this_models_entries_only_and_clear_all_every_models(tmp_path):
    one, other = tier(tmp_path, key="one"), tier(tmp_path, key="other")
    a, b, c = list(range(20)), list(range(100, 120)), list(range(200, 220))
    one.write(a, payload_of(a))
    other.write(b, payload_of(b))
    removed = one.clear()
    assert removed["entries"] == 1 and removed["bytes"] > 0
    assert one.stats()["entries"] == 0 and other.stats()["entries"] == 1
    one.write(c, payload_of(c))
    assert clear_all(tmp_path)["entries"] == 2
    assert one.stats()["entries"] == other.stats()["entries"] == 0
