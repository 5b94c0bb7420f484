"""Per-model slot metrics: declared once per slot, recorded through `add` / `observe` / `set`,
exported through Ray (deployments/ray_metrics.py: Prometheus names `ray_<name>`, with the
replica's `deployment` and `replica` tags) and kept as running totals for the JSON summary of
GET /metrics.

Ray-free outside a Serve replica: there only the totals are kept (unit tests, tools).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from deployments import ray_metrics

MS_BOUNDARIES = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000)
# Real-time factor: processing time over audio time (below 1 is faster than real time).
RTF_BOUNDARIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10)


@dataclass(frozen=True)
class Histogram:
    """A latency-like value: totals keep `<key>_count`, `<key>_<unit>_sum|max|mean`."""

    name: str
    description: str
    unit: str = "ms"
    boundaries: tuple[float, ...] = MS_BOUNDARIES
    tags: tuple[str, ...] = ("model",)
    kind: str = "histogram"


@dataclass(frozen=True)
class Counter:
    name: str
    description: str
    tags: tuple[str, ...] = ("model",)
    kind: str = "counter"


@dataclass(frozen=True)
class Gauge:
    """A value now (sequences running, sessions open): totals keep the last one set."""

    name: str
    description: str
    tags: tuple[str, ...] = ("model",)
    kind: str = "gauge"


Spec = Counter | Histogram | Gauge

# What every slot replica reports, whatever its slot (deployments/slot_replica.py samples them).
REPLICA_METRICS: dict[str, Spec] = {
    "model_loaded": Gauge("ominix_model_loaded", "1 while the replica holds the model, 0 once it is unloaded"),
    "memory_bytes": Gauge(
        "ominix_replica_memory_bytes",
        "The replica's memory: MLX arrays (mlx_active: the models' weights and caches), MLX's "
        "buffer cache (mlx_cache), the process's resident set (rss)",
        tags=("kind",),
    ),
}


class ModelMetrics:
    """Counters, gauges and histograms tagged by model, declared as {summary key: spec}."""

    def __init__(self, declared: dict[str, Spec]):
        self.declared = declared
        self.totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, model: str, key: str, value: float = 1) -> None:
        self.totals[model][key] += value
        ray_metrics.record(self.declared[key], value, {"model": model})

    def set(self, model: str, key: str, value: float) -> None:
        self.totals[model][key] = value
        ray_metrics.record(self.declared[key], value, {"model": model})

    def observe(self, model: str, key: str, value: float) -> None:
        unit = self.declared[key].unit
        t = self.totals[model]
        t[f"{key}_count"] += 1
        t[f"{key}_{unit}_sum"] += value
        t[f"{key}_{unit}_max"] = max(t[f"{key}_{unit}_max"], value)
        ray_metrics.record(self.declared[key], value, {"model": model})

    def summary(self, model: str) -> dict[str, float]:
        t = dict(self.totals.get(model, {}))
        for key, spec in self.declared.items():
            if isinstance(spec, Histogram) and t.get(f"{key}_count"):
                t[f"{key}_{spec.unit}_mean"] = t[f"{key}_{spec.unit}_sum"] / t[f"{key}_count"]
        return t

    def summaries(self) -> dict[str, dict[str, float]]:
        return {model: self.summary(model) for model in list(self.totals)}


class LoadedModelsGauge:
    """`ominix_model_loaded`: 1 for each model the replica holds; a model it held before and
    no longer does is set to 0, so its series ends at 0 instead of staying at its last 1."""

    def __init__(self):
        self.seen: set[str] = set()

    def sample(self, loaded: list[str]) -> None:
        spec = REPLICA_METRICS["model_loaded"]
        for model in sorted(self.seen - set(loaded)):
            ray_metrics.record(spec, 0, {"model": model})
        for model in loaded:
            ray_metrics.record(spec, 1, {"model": model})
        self.seen.update(loaded)


# deployments/control/agent.py's memory_snapshot() keys, as the gauge's `kind` tag.
MEMORY_KINDS = {"mlx_active_bytes": "mlx_active", "mlx_cache_bytes": "mlx_cache", "rss_bytes": "rss"}


def record_memory(snapshot: dict[str, int]) -> None:
    for key, kind in MEMORY_KINDS.items():
        if key in snapshot:
            ray_metrics.record(REPLICA_METRICS["memory_bytes"], snapshot[key], {"kind": kind})
