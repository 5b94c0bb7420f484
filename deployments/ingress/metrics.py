"""Request metrics of the ingress: Ray (Prometheus) counters and a JSON summary.

Ray Serve's own metrics (ray_serve_*) stay as they are; these add per-route counts by status
and latency, and per LLM model the structured answers checked against their schemas by the
ingress (deployments/ingress/serving/structured.py): valid, resampled, not met, cut by
max_tokens. Routes are labelled by their template (`/v1/models/{model_id:path}`), never by the
raw path, so a flood of random URLs cannot blow up the label set.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Optional

from deployments import ray_metrics
from deployments.metrics import Counter as CounterSpec
from deployments.metrics import Histogram

INGRESS_METRICS = {
    "requests": CounterSpec("ominix_requests", "Requests by route and status", tags=("route", "method", "status")),
    "latency": Histogram(
        "ominix_request_latency_ms",
        "Request latency (until the response ends)",
        boundaries=(5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000),
        tags=("route", "method"),
    ),
    "schema_checks": CounterSpec(
        "ominix_schema_checks",
        "Finished structured answers checked against their JSON Schemas, by result: valid; resampled "
        "(invalid, another attempt made); not_met (invalid, the budget spent); cut (by max_tokens, unchecked)",
        tags=("model", "result"),
    ),
}
# The results of a schema check (the `result` tag).
SCHEMA_RESULTS = ("valid", "resampled", "not_met", "cut")


class IngressMetrics:
    def __init__(self):
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self.schema_checks: Counter[tuple[str, str]] = Counter()

    def record(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests[(method, route, status)] += 1
        ray_metrics.record(INGRESS_METRICS["requests"], 1, {"route": route, "method": method, "status": str(status)})
        ray_metrics.record(INGRESS_METRICS["latency"], seconds * 1000, {"route": route, "method": method})

    def schema_check(self, model: str, result: str) -> None:
        self.schema_checks[(model, result)] += 1
        ray_metrics.record(INGRESS_METRICS["schema_checks"], 1, {"model": model, "result": result})

    def summary(self) -> dict:
        by_route: dict[str, dict[str, int]] = {}
        for (method, route, status), n in sorted(self.requests.items()):
            by_route.setdefault(f"{method} {route}", {})[str(status)] = n
        errors = sum(n for (_, _, status), n in self.requests.items() if status >= 400)
        checks: dict[str, dict[str, int]] = {}
        for (model, result), n in sorted(self.schema_checks.items()):
            checks.setdefault(model, dict.fromkeys(SCHEMA_RESULTS, 0))[result] = n
        return {
            "requests_total": sum(self.requests.values()),
            "errors_total": errors,
            "by_route": by_route,
            "schema_checks": checks,
        }


class RequestMetrics:
    """ASGI middleware feeding IngressMetrics (outermost, so rejections are counted too)."""

    def __init__(self, app, metrics: Callable[[], IngressMetrics]):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status: Optional[int] = None

        async def tracking_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        finally:
            route = getattr(scope.get("route"), "path", None) or "(unmatched)"
            self.metrics().record(scope.get("method", ""), route, status or 500, time.perf_counter() - start)
