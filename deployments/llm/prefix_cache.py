"""The prompt (prefix) cache: a request whose prompt starts like an earlier one skips the prefill
of what they share (a common system prompt, the history of a multi-turn chat).

It keeps the KV caches of finished prompts in mlx-lm's `LRUPromptCache` (a token trie with
least-recently-used eviction by count and bytes), the way `mlx_lm.server` does, at three points:
- the end of the system prompt (shared by every conversation that uses it),
- the end of the prompt but its last token (the whole history, for the next turn),
- the end of a generation (the history plus the answer: what the next turn's prompt starts with).

Behind it, optionally, a disk tier (deployments/llm/disk_cache.py) that every LLM replica of
the node shares: a cache of at least `disk_cache_min_tokens` tokens is written there in the
background once it proves it is read again (deployments/llm/admission.py: its second sight, a
prefix a prompt reuses from RAM or kept a second time, or a RAM entry that was reused when RAM
evicts it), and a prompt whose stored prefix on disk is longer than what RAM holds loads it
instead of prefilling, when the tier's `LoadRule` says loading is faster on this machine. RAM
evictions are seen through `watch_evictions`.

Entries are kept per adapter: a prompt run with a LoRA adapter (deployments/llm/lora.py) has
other keys and values than the same tokens on the base model, so each adapter (named by its
content's fingerprint) has its own namespace in both tiers and never starts from another's, nor
from the base model's, cache.

Used by the engine thread only (no locking). Plans are plain data so the logic is testable
without a model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.llm.admission import Admission
from deployments.llm.disk_cache import DiskCache, LoadRule, entry_name

logger = logging.getLogger(__name__)

SYSTEM, HISTORY, ANSWER = "system", "user", "assistant"  # mlx-lm's names for the three kinds
DISK_ATTEMPTS = 3  # stored prefixes one prompt tries, longest first, when one proves bad


@dataclass
class PrefillPlan:
    """How a prompt goes into the batch: a reused cache and what is left to prefill."""

    cache: Optional[list[Any]]  # the KV cache of `tokens[:cached]`, or None
    cached: int
    segments: list[list[int]]  # what is left, split where a cache is worth keeping
    # The kind of cache to keep at each segment end but the last, in order.
    keep_at_ends: list[str] = field(default_factory=list)


def plan_segments(tokens: list[int], cached: int, system_end: int) -> tuple[list[list[int]], list[str]]:
    """Split `tokens[cached:]` at the end of the system prompt and before the last token.

    BatchGenerator stops at every segment end (it also splits off the last token itself), and
    the engine keeps the cache there."""
    segments, keep = [], []
    if cached < system_end < len(tokens) - 1:
        segments.append(tokens[cached:system_end])
        keep.append(SYSTEM)
        cached = system_end
    if len(tokens) - cached > 1:
        keep.append(HISTORY)  # the generator's own split before the last token
    segments.append(tokens[cached:])
    return segments, keep


class PrefixCache:
    """`disk`: the base model's disk tier; `disk_for(namespace)`: an adapter's (None: adapters
    get none)."""

    def __init__(
        self,
        model_key: str,
        max_entries: int,
        max_bytes: int,
        disk: Optional[DiskCache] = None,
        disk_for: Optional[Callable[[str], Optional[DiskCache]]] = None,
    ):
        from mlx_lm.models.cache import LRUPromptCache

        self.model_key = model_key
        self._lru = LRUPromptCache(max_size=max_entries, max_bytes=max_bytes)
        self.hits = 0
        self.cached_tokens = 0
        self.disk = disk if disk is not None and disk.enabled else None
        self._disk_for = disk_for if self.disk is not None else None
        self._adapter_disks: dict[str, Optional[DiskCache]] = {}
        self.load_rule = LoadRule()
        self.disk_cached_tokens = 0  # of cached_tokens, those the disk tier gave
        self._admissions: dict[str, Admission] = {}  # by namespace ("": the base model)
        # Caches offered to the disk tier, by why (and those kept once, which were not).
        self.admitted = {"seen_once": 0, "kept_again": 0, "reused": 0, "evicted_after_reuse": 0}
        if self.disk is not None:
            watch_evictions(self._lru, lambda model, tokens, cache: self._guarded(self._evicted, model, tokens, cache))

    def _key(self, namespace: str) -> str:
        """The RAM tier's key: the model's, and the adapter's namespace ("": the base model)."""
        return f"{self.model_key}@{namespace}" if namespace else self.model_key

    def _tier(self, namespace: str) -> Optional[DiskCache]:
        if not namespace or self.disk is None:
            return self.disk
        if namespace not in self._adapter_disks:
            tier = self._disk_for(namespace) if self._disk_for is not None else None
            self._adapter_disks[namespace] = tier if tier is not None and tier.enabled else None
        return self._adapter_disks[namespace]

    def plan(self, tokens: list[int], system_end: int = 0, namespace: str = "") -> PrefillPlan:
        cache, rest = self._lru.fetch_nearest_cache(self._key(namespace), tokens)
        cache, cached = _runnable(cache, len(tokens) - len(rest) if cache is not None else 0, tokens)
        from_disk = self._guarded(self._from_disk, tokens, cached, namespace)
        if from_disk is not None:
            cache, cached = from_disk
            self.disk_cached_tokens += cached
        elif cached:  # before the batch takes the cache: what it reused is seen a second time
            self._guarded(self._reused, tokens, cache, cached, namespace)
        if cached:
            self.hits += 1
            self.cached_tokens += cached
        segments, keep = plan_segments(tokens, cached, system_end)
        return PrefillPlan(cache if cached else None, cached, segments, keep)

    def _from_disk(self, tokens: list[int], cached: int, namespace: str = "") -> Optional[tuple[list[Any], int]]:
        """The disk tier's longest prefix of `tokens`, when it is longer than the `cached`
        tokens RAM gave and loading it is measured faster than prefilling the difference."""
        disk = self._tier(namespace)
        if disk is None:
            return None
        for _ in range(DISK_ATTEMPTS):  # a bad entry is removed: the next longest may be good
            name = disk.lookup(tokens, longer_than=cached)
            stored = int(name.split("-", 1)[0]) if name else 0
            if not name or not self.load_rule.worth_loading(min(stored, len(tokens) - 1), cached):
                return None
            start = time.perf_counter()
            found = disk.read(name, tokens)
            if found is not None:
                self.load_rule.loaded(found[1], time.perf_counter() - start)
                cache, loaded = _runnable(*found, tokens)
                return (cache, loaded) if loaded > cached else None
        return None

    def prefilled(self, tokens: int, seconds: float) -> None:
        """A prompt prefilled `tokens` in `seconds` (to its first token): the load rule learns."""
        self.load_rule.prefilled(tokens, seconds)

    def keep(self, tokens: list[int], cache: list[Any], kind: str, namespace: str = "") -> None:
        if not tokens:
            return
        # Asked before the insert, which may evict this very entry (the hook then forgets it).
        again = self._guarded(self._kept_again, tokens, namespace)
        self._lru.insert_cache(self._key(namespace), list(tokens), cache, cache_type=kind)
        if again:
            self._guarded(self._to_disk, tokens, cache, namespace, "kept_again")

    # ------------------------------------------------------------------ disk admission

    def _admission(self, namespace: str) -> Admission:
        """Each namespace's own admission: the same tokens on another adapter are another cache."""
        return self._admissions.setdefault(namespace, Admission())

    def _long_enough(self, length: int, namespace: str) -> bool:
        disk = self._tier(namespace)
        return disk is not None and length >= disk.min_tokens

    def _kept_again(self, tokens: list[int], namespace: str) -> bool:
        """Whether a cache being kept is its prefix's second sight here (the first is only
        remembered)."""
        if not self._long_enough(len(tokens), namespace):
            return False
        again = self._admission(namespace).kept(entry_name(tokens))
        self.admitted["seen_once"] += not again
        return again

    def _reused(self, tokens: list[int], cache: list[Any], cached: int, namespace: str) -> None:
        """A prompt starts from `cached` tokens the RAM tier held: the longest prefix of them
        where a cache was kept before (a system prompt's end, the previous turn's prompt or
        answer) is seen a second time and goes to disk now, cut from the cache before the batch
        extends it."""
        if not self._long_enough(cached, namespace):
            return
        admission = self._admission(namespace)
        length = admission.seen_prefix(tokens, cached)
        if length is None or not self._long_enough(length, namespace) or (length < cached and not _can_cut(cache)):
            return
        key = entry_name(tokens[:length])
        if admission.reused(key):
            self._to_disk(tokens[:length], cache, namespace, "reused", key)

    def _evicted(self, model: str, tokens: list[int], cache: list[Any]) -> None:
        """The RAM tier dropped a cache: one that prompts reused goes to disk if it is not there."""
        namespace = model.partition("@")[2] if model != self.model_key else ""
        if self._long_enough(len(tokens), namespace) and self._admission(namespace).evicted(entry_name(tokens)):
            self._to_disk(tokens, cache, namespace, "evicted_after_reuse")

    def _to_disk(
        self, tokens: list[int], cache: list[Any], namespace: str, why: str, key: Optional[str] = None
    ) -> None:
        disk = self._tier(namespace)
        if disk is None or not disk.wants(tokens):
            return
        payload = snapshot(cache, len(tokens))
        if payload is not None and disk.offer(tokens, payload):
            self._admission(namespace).offered(key or entry_name(tokens))
            self.admitted[why] += 1

    def _guarded(self, step, *args):
        """A disk tier step; one that raises turns the disk tier off (the RAM tier and the
        request go on: the tier only saves time)."""
        if self.disk is None:
            return None
        try:
            return step(*args)
        except Exception:
            logger.exception("The prompt cache's disk tier failed; it is turned off for this replica")
            for tier in [self.disk, *self._adapter_disks.values()]:
                if tier is not None:
                    tier.stop()
            self.disk, self._disk_for, self._adapter_disks = None, None, {}
            return None

    def trim_to(self, max_bytes: int) -> None:
        self._lru.trim_to(n_bytes=max_bytes)

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self._lru),
            "bytes": self._lru.nbytes,
            "hits": self.hits,
            "cached_tokens": self.cached_tokens,
        }

    def tiers(self) -> dict[str, Any]:
        """Per tier: entries, bytes, hits (GET /metrics shows it per model). Read from the
        replica's event loop while the engine thread runs: the tier is read once."""
        ram = self.stats()
        ram["cached_tokens"] -= self.disk_cached_tokens
        tier = self.disk
        if tier is None:
            return {"ram": ram}
        disk = {**tier.stats(), "cached_tokens": self.disk_cached_tokens, "admitted": dict(self.admitted)}
        rule = self.load_rule
        disk["load_ms_per_1k_tokens"] = None if rule.load_s_per_token is None else rule.load_s_per_token * 1e6
        disk["prefill_ms_per_1k_tokens"] = None if rule.prefill_s_per_token is None else rule.prefill_s_per_token * 1e6
        return {"ram": ram, "disk": disk}

    def close(self) -> None:
        for tier in [self.disk, *self._adapter_disks.values()]:
            if tier is not None:
                tier.close()


def _runnable(cache: Optional[list[Any]], cached: int, tokens: list[int]) -> tuple[Optional[list[Any]], int]:
    """A cache of `cached` tokens of the prompt as the batch can start from it: one that holds
    the whole prompt loses its last token, which has to run to give the logits (or, when the
    cache cannot be trimmed, is not used)."""
    from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

    if cache is None or cached <= 0:
        return None, 0
    if cached < len(tokens):
        return cache, cached
    if can_trim_prompt_cache(cache):
        trim_prompt_cache(cache, cached - len(tokens) + 1)
        return cache, len(tokens) - 1
    return None, 0


def _can_cut(cache: list[Any]) -> bool:
    from mlx_lm.models.cache import can_trim_prompt_cache

    return can_trim_prompt_cache(cache)


def watch_evictions(lru: Any, on_evict: Callable[[Any, list[int], list[Any]], None]) -> None:
    """Call `on_evict(model, tokens, cache)` (`model`: the entry's key) for each entry mlx-lm's `LRUPromptCache` drops: past its
    count or bytes (insert_cache), in `trim_to`, or a prefix that a longer trimmable cache now
    covers (insert_cache's pop_prefixes). Every one of those goes through its trie's `pop` and
    `pop_prefixes` (mlx-lm 0.31-0.32: `LRUPromptCache._trie`, a `PromptTrie`), wrapped here on
    that one instance; tests/unit/llm/test_prefix_cache.py fails if a release moves them.
    `on_evict` runs inside the RAM tier's own bookkeeping: it must not raise."""
    trie = lru._trie
    pop, pop_prefixes = trie.pop, trie.pop_prefixes

    def popped(model: Any, tokens: list[int]) -> Any:
        entry = pop(model, tokens)
        on_evict(model, list(tokens), entry.prompt_cache)
        return entry

    def popped_prefixes(model: Any, tokens: list[int]) -> list[tuple[int, Any]]:
        entries = pop_prefixes(model, tokens)
        for length, entry in entries:
            on_evict(model, list(tokens[:length]), entry.prompt_cache)
        return entries

    trie.pop, trie.pop_prefixes = popped, popped_prefixes


def snapshot(cache: list[Any], length: Optional[int] = None) -> Optional[list[Any]]:
    """A copy of `cache` (of its first `length` tokens, when given) ready for the disk tier's
    writer thread: only the filled part of each KV buffer, evaluated here, on the engine
    thread, so the writer runs no MLX computation (MLX work stays on the thread that owns the
    model: deployments/engine_thread.py). None when a layer's cache cannot be cut to `length`
    (a rotating or recurrent layer's)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import KVCache

    held = max((getattr(c, "offset", 0) for c in cache), default=0)
    if length is not None and length < held and any(type(c) is not KVCache for c in cache):
        return None
    out = []
    for c in cache:
        offset = c.offset if length is None or type(c) is not KVCache else min(c.offset, length)
        if type(c) is KVCache and c.keys is not None and offset < c.keys.shape[2]:
            # Contiguous here: the writer's save would otherwise copy a strided view itself.
            keys, values = (mx.contiguous(a[..., :offset, :]) for a in (c.keys, c.values))
            c = KVCache.from_state((keys, values, offset))
        out.append(c)
    mx.eval([a for _, a in tree_flatten([c.state for c in out]) if isinstance(a, mx.array)])
    return out


def save_cache(path: str, cache: list[Any]) -> None:
    """The disk tier's `save`: mlx-lm's prompt cache file (safetensors)."""
    from mlx_lm.models.cache import save_prompt_cache

    save_prompt_cache(path, cache)


def load_cache(path: str) -> list[Any]:
    """The disk tier's `load`, evaluated so that its time is the load's, not the first step's."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.cache import load_prompt_cache

    cache = load_prompt_cache(path)
    mx.eval([a for _, a in tree_flatten([c.state for c in cache]) if isinstance(a, mx.array)])
    return cache
