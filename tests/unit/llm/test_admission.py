"""The disk tier's admission (deployments/llm/admission.py): a prefix reaches disk on its second
sight (kept again, or reused from RAM: the longest prefix of what was reused where a cache was
kept) or when RAM evicts an entry prompts reused and the disk lacks it; the sketch of what was
seen is bounded. Then the same through the prompt cache (deployments/llm/prefix_cache.py) on
mlx-lm's real `LRUPromptCache`, with hand-made KV caches (no model) and real files."""

from __future__ import annotations

import pytest

from deployments.llm.admission import Admission
from deployments.llm.disk_cache import DiskCache, entry_name
from deployments.llm.prefix_cache import ANSWER, HISTORY, SYSTEM, PrefixCache, load_cache, save_cache

SYSTEM_TOKENS = list(range(100, 140))  # a 40-token system prompt


def test_a_prefix_kept_once_is_remembered_and_admitted_when_kept_again():
    admission = Admission()
    key = entry_name(SYSTEM_TOKENS)
    assert not admission.kept(key)
    assert admission.kept(key)
    admission.offered(key)
    assert not admission.kept(key)  # this replica sent it already


def test_what_a_prompt_reused_is_cut_back_to_where_a_cache_was_kept():
    admission = Admission()
    history = SYSTEM_TOKENS + [7, 8, 9]
    for tokens in (SYSTEM_TOKENS, history):
        admission.kept(entry_name(tokens))
    # A second question diverging after the system prompt and two template tokens.
    other = SYSTEM_TOKENS + [7, 8, 5, 5]
    assert admission.seen_prefix(other, 42) == len(SYSTEM_TOKENS)
    # The same prompt again reuses all of its history.
    assert admission.seen_prefix(history + [1], len(history)) == len(history)
    # Reused tokens that hold no kept prefix: nothing to admit.
    assert admission.seen_prefix([1] * 60, 59) is None


def test_a_reused_ram_entry_is_offered_when_evicted():
    admission = Admission()
    kept, reused = entry_name(SYSTEM_TOKENS), entry_name(SYSTEM_TOKENS + [1])
    admission.kept(kept)
    admission.kept(reused)
    assert admission.reused(reused)  # not sent yet: write it now
    admission.offered(reused)
    assert not admission.reused(reused)
    assert not admission.evicted(kept)  # never reused: RAM only
    assert admission.evicted(reused)  # reused: the disk tier checks whether it still holds it
    assert not admission.evicted(reused)  # gone from RAM


def test_the_sketch_is_bounded_and_forgets_the_oldest():
    admission = Admission(capacity=3)
    keys = [entry_name([n] * 20) for n in range(4)]
    for key in keys:
        admission.kept(key)
    assert admission.seen_prefix([0] * 20, 20) is None  # forgotten: the fourth pushed it out
    assert admission.seen_prefix([3] * 21, 20) == 20
    assert not admission.kept(keys[0])  # a first sight again
    assert admission.kept(keys[3])


# --------------------------------------------------------------------------- on the RAM tier


def kv(tokens: list[int]) -> list:
    """A one-layer KV cache holding `tokens`' positions (their ids as values: a cut shows)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    cache = KVCache()
    values = mx.array(tokens, dtype=mx.float32).reshape(1, 1, len(tokens), 1)
    cache.update_and_fetch(values, values)
    return [cache]


@pytest.fixture
def prompt_cache(tmp_path):
    def make(entries=4, budget=1 << 30):
        disk = DiskCache(tmp_path, "model", budget, min_tokens=16, save=save_cache, load=load_cache)
        return PrefixCache("model", entries, 1 << 30, disk)

    return make


def stored(cache: PrefixCache) -> list[int]:
    cache.disk.flush()
    return sorted(int(p.name[:8]) for p in cache.disk.directory.glob("*.json"))


def test_one_off_prompts_write_nothing(prompt_cache):
    cache = prompt_cache()
    for n in range(6):
        prompt = [1000 + n] * 50  # nothing shared
        cache.keep(prompt[:49], kv(prompt[:49]), HISTORY)
        cache.keep(prompt + [1, 2], kv(prompt + [1, 2]), ANSWER)
    assert stored(cache) == [] and cache.admitted["seen_once"] == 12


def test_a_second_question_on_a_system_prompt_writes_the_system_prompt(prompt_cache):
    cache = prompt_cache()
    first = SYSTEM_TOKENS + [5, 6, 7, 8]
    cache.keep(SYSTEM_TOKENS, kv(SYSTEM_TOKENS), SYSTEM)
    cache.keep(first + [9], kv(first + [9]), ANSWER)  # RAM now holds this one (it covers the system prompt's)
    plan = cache.plan(SYSTEM_TOKENS + [5, 6, 3, 3], system_end=len(SYSTEM_TOKENS))
    assert plan.cached == 42  # the system prompt and the two tokens the questions share
    assert stored(cache) == [40] and cache.admitted["reused"] == 1
    import mlx.core as mx

    (written,) = load_cache(str(next(cache.disk.directory.glob("*.safetensors"))))
    assert written.offset == 40 and mx.array_equal(written.keys[0, 0, :, 0], mx.array(SYSTEM_TOKENS))


def test_a_reused_entry_the_disk_lost_is_written_again_when_ram_evicts_it(prompt_cache):
    """The disk's budget fits one entry: the second one written evicts the first from disk; when
    RAM evicts that first one, which a prompt reused, it goes back to disk."""
    cache = prompt_cache(entries=2)
    a, b = [1] * 30, [2] * 30
    cache.keep(a, kv(a), HISTORY)
    cache.plan(a + [3], 0)  # reused: written
    assert stored(cache) == [30]
    cache.disk.budget_bytes = sum(e.nbytes for e in cache.disk.scan())  # room for one
    cache.keep(b, kv(b), HISTORY)
    cache.plan(b + [3], 0)  # reused: written, and a evicted from disk
    assert stored(cache) == [30] and cache.disk.lookup(a + [3]) is None  # a is in RAM only
    cache.keep([4] * 30, kv([4] * 30), HISTORY)  # a third entry: RAM evicts a, the oldest
    assert cache.admitted == {"seen_once": 3, "kept_again": 0, "reused": 2, "evicted_after_reuse": 1}
    cache.disk.flush()
    assert cache.disk.lookup(a + [3]) == entry_name(a)


def test_every_ram_eviction_is_seen(prompt_cache):
    """The hook on mlx-lm's LRUPromptCache sees each way it drops an entry: past its count, by
    trim_to, and a prefix a longer cache now covers. Fails if mlx-lm moves its trie."""
    cache = prompt_cache(entries=2)
    dropped = []
    evicted = cache._evicted
    cache._evicted = lambda model, tokens, c: dropped.append(len(tokens)) or evicted(model, tokens, c)
    cache.keep([1] * 20, kv([1] * 20), SYSTEM)
    cache.keep([1] * 25, kv([1] * 25), HISTORY)  # covers the first
    assert dropped == [20]
    cache.keep([2] * 20, kv([2] * 20), HISTORY)
    cache.keep([3] * 20, kv([3] * 20), HISTORY)  # past 2 entries: the oldest goes
    assert dropped == [20, 25]
    cache.trim_to(0)
    assert sorted(dropped) == [20, 20, 20, 25] and cache.stats()["entries"] == 0


def test_an_adapters_prefix_is_admitted_to_its_own_tier_not_on_the_base_models_sight(tmp_path):
    """The same tokens on the base model and on an adapter are two caches: each one's first
    sight is only remembered; the adapter's second sight goes to the adapter's tier."""
    disk = DiskCache(tmp_path / "base", "model", 1 << 30, min_tokens=16, save=save_cache, load=load_cache)
    tiers = {}

    def adapter_tier(namespace):
        tiers[namespace] = DiskCache(tmp_path / namespace, "model", 1 << 30, 16, save=save_cache, load=load_cache)
        return tiers[namespace]

    cache = PrefixCache("model", 4, 1 << 30, disk, disk_for=adapter_tier)
    cache.keep(SYSTEM_TOKENS, kv(SYSTEM_TOKENS), SYSTEM)
    cache.keep(SYSTEM_TOKENS, kv(SYSTEM_TOKENS), SYSTEM, namespace="apricot")
    assert stored(cache) == [] and cache.admitted["seen_once"] == 2
    cache.keep(SYSTEM_TOKENS, kv(SYSTEM_TOKENS), SYSTEM, namespace="apricot")
    tiers["apricot"].flush()
    assert stored(cache) == [] and len(list(tiers["apricot"].directory.glob("*.json"))) == 1
