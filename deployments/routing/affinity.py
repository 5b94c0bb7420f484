"""Affinity routing without Ray: which key a request carries and which replica a key goes to.

A slot replica keeps state that later requests want: the LLM's prompt (prefix) cache, a
streaming-ASR session. Requests that share such state carry the same *affinity key*; a key is
mapped to replicas by rendezvous (highest-random-weight) hashing, so every router (one per
ingress replica) agrees on a key's replica without sharing state, and adding or removing a
replica only moves the keys that ranked it first.

Two modes:
- soft (the LLM): the key's first-ranked replica unless its queue is more than `max_imbalance`
  requests longer than the least loaded one; then the next-ranked replica within that bound
  (consistent hashing with bounded loads), so a hot key spills onto a second replica (which
  builds the same cache) instead of pinning all load on one.
- strict (sessions): a key stays on the replica it first went to while that replica lives
  (`PinTable`), whatever the load; a key made by `replica_key` names its replica outright.

Used by deployments/routing/router.py (the Serve side) and by the ingress (key extraction).
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

# How much of a conversation's head names it when no key is given: enough to tell
# conversations apart, bounded so hashing stays cheap on long prompts.
HEAD_CHARS = 4096
# Text completions have no turn structure: their key is the prompt's first characters.
# A multi-turn client whose first prompt is shorter than this should send prompt_cache_key.
COMPLETION_HEAD_CHARS = 256
DEFAULT_MAX_IMBALANCE = 4
OWNER_TAG = "@"  # replica_key(): "@<replica id>/<token>"


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


# ---------------------------------------------------------------------------------------------
# Keys


def explicit_key(request: Any, session_header: Optional[str] = None) -> str:
    """The key a client named: OpenAI's `prompt_cache_key`, else `user`, else the session
    header (x-session-id); "" when none. Namespaced so a user id never equals a cache key."""
    for kind, value in (
        ("cache", getattr(request, "prompt_cache_key", None)),
        ("user", getattr(request, "user", None)),
        ("session", session_header),
    ):
        if value:
            return f"{kind}:{value}"
    return ""


def conversation_head(request: Any) -> str:
    """What every turn of a conversation starts with: for chat, the leading system/developer
    messages and the first user message (later turns resend them unchanged); for text
    completions, the prompt's first characters."""
    messages = getattr(request, "messages", None)
    if messages is not None:
        head = []
        for message in messages:
            head.append(f"{message.role}\n{message.text()[:HEAD_CHARS]}")
            if message.role == "user":
                break
        return "\x00".join(head)
    prompt = getattr(request, "prompt", "")
    if isinstance(prompt, list):
        prompt = prompt[0] if prompt and isinstance(prompt[0], str) else " ".join(map(str, prompt))
    return str(prompt)[:COMPLETION_HEAD_CHARS]


def llm_affinity_key(request: Any, session_header: Optional[str] = None) -> str:
    """The affinity key of a chat/completion request: the client's key, else its prefix on the
    model it names (a LoRA adapter's prompts are cached apart from its base model's: the same
    head on two adapters is two prefixes)."""
    explicit = explicit_key(request, session_header)
    if explicit:
        return explicit
    model = getattr(request, "model", None)
    head = conversation_head(request)
    return "prefix:" + _digest(model + "\x00" + head if model else head)


def replica_key(replica_id: str, token: str) -> str:
    """A key that names its replica (a session created there): routed there while it lives."""
    return f"{OWNER_TAG}{replica_id}/{token}"


def owner_of(key: str) -> Optional[str]:
    """The replica a `replica_key` names, None for other keys."""
    if not key.startswith(OWNER_TAG) or "/" not in key:
        return None
    return key[len(OWNER_TAG) :].split("/", 1)[0] or None


# ---------------------------------------------------------------------------------------------
# Key -> replica


def _weight(key: str, replica: str) -> int:
    return int(hashlib.blake2b(f"{key}\x00{replica}".encode(), digest_size=8).hexdigest(), 16)


def rank_replicas(key: str, replicas: Iterable[str]) -> list[str]:
    """The replicas in the key's preference order (rendezvous hashing: stable per key)."""
    return sorted(replicas, key=lambda r: _weight(key, r), reverse=True)


def bounded_order(
    key: str,
    loads: Mapping[str, Optional[int]],
    max_imbalance: int = DEFAULT_MAX_IMBALANCE,
    capacities: Optional[Mapping[str, int]] = None,
) -> list[str]:
    """The replicas to try, best first: the key's highest-ranked replica whose queue is within
    `max_imbalance` of the least loaded (and below its capacity), then the others in rank
    order. Unknown loads (None: no answer) are never preferred."""
    ranked = rank_replicas(key, loads)
    known = [q for q in loads.values() if q is not None]
    floor = min(known, default=0)
    capacities = capacities or {}
    for i, replica in enumerate(ranked):
        q = loads[replica]
        if q is not None and q <= floor + max_imbalance and q < capacities.get(replica, q + 1):
            return [replica] + ranked[:i] + ranked[i + 1 :]
    return ranked


class PinTable:
    """Strict affinity: key -> the replica it went to, for keys used within `ttl_s`
    (least recently used dropped past `max_entries`)."""

    def __init__(self, ttl_s: float = 600.0, max_entries: int = 100_000, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._pins: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pins)

    def get(self, key: str) -> Optional[str]:
        entry = self._pins.get(key)
        if entry is None:
            return None
        replica, seen = entry
        if self._clock() - seen > self.ttl_s:
            del self._pins[key]
            return None
        return replica

    def pin(self, key: str, replica: str) -> None:
        self._pins[key] = (replica, self._clock())
        self._pins.move_to_end(key)
        while len(self._pins) > self.max_entries:
            self._pins.popitem(last=False)

    def keep_only(self, alive: Iterable[str]) -> None:
        """Drop the pins of replicas that are gone (their keys are routed afresh)."""
        alive = set(alive)
        for key in [k for k, (r, _) in self._pins.items() if r not in alive]:
            del self._pins[key]


def strict_choice(key: str, alive: Iterable[str], candidates: Iterable[str], pins: PinTable) -> Optional[str]:
    """The one replica a strict key goes to: its pin while that replica lives (whatever the
    load, and whichever models the router believes it holds), else its first-ranked candidate
    (pinned once the request is routed)."""
    pinned = pins.get(key)
    if pinned is not None and pinned in set(alive):
        return pinned
    ranked = rank_replicas(key, candidates)
    return ranked[0] if ranked else None
