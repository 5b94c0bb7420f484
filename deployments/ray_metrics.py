"""The process's Ray metric objects: what exports the graph's figures to Prometheus.

Each metric is created on its first record, once per process, through Ray Serve's public
wrappers of `ray.util.metrics` (`ray.serve.metrics`): inside a replica they declare and fill
the `deployment`, `replica` and `application` tags from the replica's context, next to the
metric's own tag keys (`model`, ...). Ray exports them from every node's metrics agent with its
own Serve metrics, prefixed `ray_` (docs/metrics.md).

Every call is a no-op while Ray is not initialised (unit tests, the in-process ingress, tools),
and a metric that Ray refuses is logged once and dropped: a figure never fails a request.
A spec is any object with `kind` ("counter", "gauge" or "histogram"), `name`, `description`,
`tags` and, for a histogram, `boundaries` (deployments/metrics.py declares them).
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Optional, Protocol

logger = logging.getLogger("ray.serve")


class Spec(Protocol):
    kind: str
    name: str
    description: str
    tags: tuple[str, ...]


_objects: dict[str, Any] = {}
_refused: set[str] = set()
_lock = threading.Lock()  # engine threads record too


def record(spec: Spec, value: float, tags: dict[str, str]) -> None:
    """Add to a counter, set a gauge or observe a histogram value."""
    metric = _metric(spec)
    if metric is None:
        return
    value = float(value)  # Ray refuses numpy scalars
    try:
        if spec.kind == "counter":
            if value > 0:  # a Prometheus counter only goes up
                metric.inc(value, tags=dict(tags))
        elif spec.kind == "gauge":
            metric.set(value, tags=dict(tags))
        else:
            metric.observe(value, tags=dict(tags))
    except Exception as e:
        _refuse(spec, e)


def _metric(spec: Spec) -> Optional[Any]:
    if spec.name in _refused or not ray_is_initialized():
        return None
    metric = _objects.get(spec.name)
    if metric is not None:
        return metric
    with _lock:
        if spec.name not in _objects:
            try:
                _objects[spec.name] = _create(spec)
            except Exception as e:
                _refuse(spec, e)
                return None
        return _objects[spec.name]


def _create(spec: Spec) -> Any:
    from ray.serve import metrics

    tags = tuple(spec.tags)
    if spec.kind == "counter":
        return metrics.Counter(spec.name, spec.description, tags)
    if spec.kind == "gauge":
        return metrics.Gauge(spec.name, spec.description, tags)
    return metrics.Histogram(spec.name, spec.description, list(spec.boundaries), tags)


def _refuse(spec: Spec, error: Exception) -> None:
    if spec.name not in _refused:
        _refused.add(spec.name)
        logger.warning("Metric %s is not exported: %s: %s", spec.name, type(error).__name__, error)


def ray_is_initialized() -> bool:
    """Without importing Ray: a process that never imported it has no Ray to export through."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()
