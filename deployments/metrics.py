"""Per-model slot metrics: Ray Serve metrics (exported to Prometheus as `ray_<name>`) plus
running totals for the JSON summary of GET /metrics. Every slot declares its
counters and histograms here once and records through `add` / `observe`.

Ray-free outside a Serve replica: there only the totals are kept (unit tests, tools).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

MS_BOUNDARIES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000]


@dataclass(frozen=True)
class Histogram:
    """A latency-like value: totals keep `<key>_count`, `<key>_<unit>_sum|max|mean`."""

    name: str
    description: str
    unit: str = "ms"
    boundaries: tuple[float, ...] = tuple(MS_BOUNDARIES)


@dataclass(frozen=True)
class Counter:
    name: str
    description: str


class ModelMetrics:
    """Counters and histograms tagged by model, declared as {summary key: Counter | Histogram}."""

    def __init__(self, declared: dict[str, Counter | Histogram]):
        self.declared = declared
        self.totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._serve: dict[str, object] = {}
        try:  # only inside a Serve replica
            from ray.serve import metrics as serve_metrics

            for key, spec in declared.items():
                if isinstance(spec, Counter):
                    self._serve[key] = serve_metrics.Counter(spec.name, spec.description, ("model",))
                else:
                    self._serve[key] = serve_metrics.Histogram(
                        spec.name, spec.description, list(spec.boundaries), ("model",)
                    )
        except Exception:
            self._serve = {}

    def add(self, model: str, key: str, value: float = 1) -> None:
        self.totals[model][key] += value
        if key in self._serve and value > 0:  # Prometheus counters only go up
            self._serve[key].inc(value, tags={"model": model})

    def observe(self, model: str, key: str, value: float) -> None:
        unit = self.declared[key].unit
        t = self.totals[model]
        t[f"{key}_count"] += 1
        t[f"{key}_{unit}_sum"] += value
        t[f"{key}_{unit}_max"] = max(t[f"{key}_{unit}_max"], value)
        if key in self._serve:
            self._serve[key].observe(value, tags={"model": model})

    def summary(self, model: str) -> dict[str, float]:
        t = dict(self.totals.get(model, {}))
        for key, spec in self.declared.items():
            if isinstance(spec, Histogram) and t.get(f"{key}_count"):
                t[f"{key}_{spec.unit}_mean"] = t[f"{key}_{spec.unit}_sum"] / t[f"{key}_count"]
        return t

    def summaries(self) -> dict[str, dict[str, float]]:
        return {model: self.summary(model) for model in list(self.totals)}
