"""Pure statistics for the benchmark results: percentiles, medians over repeats, ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Optional


def percentile(values: Iterable[float], q: float) -> Optional[float]:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Iterable[float]) -> Optional[float]:
    xs = [v for v in values if v is not None]
    return statistics.median(xs) if xs else None


def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or not b else a / b


def median_over_repeats(repeats: list[dict]) -> dict:
    """Each repeat is {metric: value}; the result is {metric: median across repeats}."""
    keys = {k for r in repeats for k in r}
    return {k: median(r.get(k) for r in repeats) for k in sorted(keys)}


def rounded(value, digits: int = 3):
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value
