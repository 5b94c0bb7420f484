"""Which prompt caches the disk tier takes: those that will be read again.

The disk tier first wrote through every cache the RAM tier kept of 256 tokens or more (a
prompt's system prompt, its history, its answer), so a burst of one-off requests with large
prompts wrote file after file that nothing read: 128 requests with large JSON schemas wrote 49
entries, 0.99 GB, for 0 hits. Like LMCache's and vLLM's offloading, a cache now reaches disk on
evidence that it is reused:

- **its second sight**, written at once, so that it is on disk before the replica can die: a
  prefix where a cache was kept before (a system prompt's end, a prompt's, an answer's) seen
  again, because a prompt reuses it from the RAM tier (the next turn of a conversation, a
  second request on a shared system prompt, the same request again) or because it is kept a
  second time (after the RAM tier let it go);
- **a RAM entry that prompts reused, when the RAM tier evicts it**, if it is not on disk by then
  (its write was dropped while the writer's queue was full, or the disk's budget evicted it).

A prompt reuses from RAM the tokens it shares with a cached one, which may end anywhere: where
two questions diverge ("Tell a story about a fox" after "... about a cat") is no place a later
prompt will stop at. What is written is the longest prefix of the reused tokens where a cache
was kept before: the shared system prompt there, the previous turn's prompt or answer in a
conversation.

The sketch of prefixes seen is bounded: the keys (`disk_cache.entry_name`: a length and a token
hash, ~50 bytes) of the last `capacity` caches kept, the least recently kept forgotten first.
It is each replica's own: a prefix kept once on each of two replicas is seen once by each.

Pure: keys and token ids; deployments/llm/prefix_cache.py holds the caches, asks here, and
offers what is admitted to the disk tier (deployments/llm/disk_cache.py).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from deployments.llm.disk_cache import longest_prefix

SEEN_CAPACITY = 4096  # prefixes remembered as kept (~100 bytes each with the index)


class Admission:
    """One replica's admission decisions, by prefix key (`entry_name`)."""

    def __init__(self, capacity: int = SEEN_CAPACITY):
        self.capacity = capacity
        self._kept: OrderedDict[str, None] = OrderedDict()  # prefixes kept, the least recently first
        self._by_length: dict[int, set[str]] = {}  # the same keys: length -> token hashes
        self._offered: OrderedDict[str, None] = OrderedDict()  # prefixes this replica sent to disk
        self._reuses: dict[str, int] = {}  # the RAM tier's entries -> how often a prompt reused them

    # ------------------------------------------------------------------ what the RAM tier does

    def kept(self, key: str) -> bool:
        """The RAM tier keeps a cache of `key`: whether the disk tier should have it now (kept
        before: this is its second sight). The first sight is only remembered."""
        again = key in self._kept
        self._remember(key)
        self._reuses.setdefault(key, 0)
        return again and key not in self._offered

    def seen_prefix(self, tokens: list[int], reused: int) -> Optional[int]:
        """The longest prefix of `tokens[:reused]` (what a prompt reuses from the RAM tier)
        where a cache was kept before: its length, or None."""
        return longest_prefix(tokens[:reused], self._by_length)

    def reused(self, key: str) -> bool:
        """A prompt reuses the prefix `key`: whether to write it now (not when this replica has
        sent it already)."""
        if key in self._reuses:
            self._reuses[key] += 1
        return key not in self._offered

    def offered(self, key: str) -> None:
        """`key` went to the disk tier's writer."""
        self._offered[key] = None
        self._offered.move_to_end(key)
        while len(self._offered) > self.capacity:
            self._offered.popitem(last=False)

    def evicted(self, key: str) -> bool:
        """The RAM tier dropped `key`: whether to offer it to disk now (prompts reused it; the
        disk tier, which knows whether it holds it already, decides the rest)."""
        return bool(self._reuses.pop(key, 0))

    # ------------------------------------------------------------------ the sketch

    def _remember(self, key: str) -> None:
        self._kept[key] = None
        self._kept.move_to_end(key)
        length, _, digest = key.partition("-")
        self._by_length.setdefault(int(length), set()).add(digest)
        while len(self._kept) > self.capacity:
            old, _ = self._kept.popitem(last=False)
            self._forget(old)

    def _forget(self, key: str) -> None:
        length, _, digest = key.partition("-")
        hashes = self._by_length.get(int(length), set())
        hashes.discard(digest)
        if not hashes:
            self._by_length.pop(int(length), None)
