"""What a slot replica evicts to make room for one more model or adapter.

A replica's multiplexer (Serve's `@serve.multiplexed`, deployments/control/replica_models.py)
holds two kinds of residents, each under its own limit: models (an engine each,
`<slot>.max_models_per_replica`) and LoRA adapters loaded into a model's engine
(`llm.max_adapters_per_replica`). Serve's own eviction counts every resident against one limit,
so an adapter could push a base model out; the replica evicts by kind instead, least recently
used first, and an adapter goes with the model it was loaded into.

Pure: the replica passes the multiplexer's order and what each resident is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

MODEL, ADAPTER = "model", "adapter"


def evictions(
    order: Sequence[str],
    kinds: Mapping[str, str],
    parents: Mapping[str, Optional[str]],
    limits: Mapping[str, int],
    new_kind: str,
) -> list[str]:
    """The residents to evict before loading one of `new_kind`: `order` is the multiplexer's,
    least recently used first; `kinds` and `parents` say what each is (an adapter's parent is
    the model it runs on). Enough of the new one's kind go, oldest first, to leave room for it
    under its limit; an evicted model takes its adapters with it."""
    limit = limits.get(new_kind, 1)
    same = [r for r in order if kinds.get(r, MODEL) == new_kind]
    victims = same[: max(0, len(same) - limit + 1)]
    gone = set(victims)
    orphans = [r for r in order if kinds.get(r) == ADAPTER and parents.get(r) in gone and r not in gone]
    return victims + orphans


def with_adapters(model: str, order: Sequence[str], kinds: Mapping[str, str], parents: Mapping[str, Optional[str]]):
    """The adapters that run on `model`, which leave when it does."""
    return [r for r in order if kinds.get(r) == ADAPTER and parents.get(r) == model]
