"""GET /metrics in Prometheus' text format or OpenMetrics, for scrapers that do not go through
Ray's metrics export: the same figures as the JSON summary (deployments/ingress/serving/metrics.py),
written with prometheus_client's exposition.

Which format: `?format=prometheus|openmetrics|json`, else the Accept header (a Prometheus
server asks for OpenMetrics first, then text/plain), else JSON, MiniInfer's contract. Series:

- `ominix_ingress_requests_total{method,route,status}`: this ingress replica's requests;
- `ominix_ingress_schema_checks_total{model,result}`: the structured answers it checked against
  their schemas, by result (valid, resampled, not_met, cut);
- `ominix_slot_up{slot}`: 1 when the slot answered the summary, 0 when it did not;
- `ominix_<slot>_<figure>{model,replica}`: each number of a slot's summary (its counters,
  histogram sums and counts, engine counters), typed unknown since the summary does not say
  which are counters; from the one replica of the slot that answered (named in `replica`).

Ray-free, so it is tested in process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Optional

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from deployments.protocol.errors import invalid_request

JSON, PROMETHEUS, OPENMETRICS = "json", "prometheus", "openmetrics"
CONTENT_TYPES = {
    PROMETHEUS: "text/plain; version=0.0.4; charset=utf-8",
    OPENMETRICS: "application/openmetrics-text; version=1.0.0; charset=utf-8",
}


def wanted_format(format: Optional[str], accept: Optional[str]) -> str:
    """json, prometheus or openmetrics: the query's `format` first, then the Accept header."""
    if format is not None:
        if format not in (JSON, PROMETHEUS, OPENMETRICS):
            raise invalid_request("format: one of json, prometheus, openmetrics", "format")
        return format
    accept = (accept or "").lower()
    if "application/openmetrics-text" in accept:
        return OPENMETRICS
    if "text/plain" in accept and "application/json" not in accept:
        return PROMETHEUS
    return JSON


def exposition(summary: dict[str, Any], format: str) -> bytes:
    collector = _SummaryCollector(summary)
    return generate_openmetrics(collector) if format == OPENMETRICS else generate_latest(collector)


class _SummaryCollector:
    """What prometheus_client's exposition reads: an object whose `collect()` gives families."""

    def __init__(self, summary: dict[str, Any]):
        self.summary = summary

    def collect(self) -> Iterator[Metric]:
        yield _ingress_requests(self.summary.get("ingress", {}))
        yield _schema_checks(self.summary.get("ingress", {}))
        slots = {name: answer for name, answer in self.summary.items() if name != "ingress"}
        up = GaugeMetricFamily("ominix_slot_up", "1 when the slot answered the summary, else 0", labels=["slot"])
        for name, answer in slots.items():
            up.add_metric([name], 0 if "error" in answer else 1)
        yield up
        for name, answer in slots.items():
            yield from _slot_families(name, answer)


def _ingress_requests(ingress: dict[str, Any]) -> Metric:
    family = CounterMetricFamily(
        "ominix_ingress_requests", "Requests this ingress replica answered", labels=["method", "route", "status"]
    )
    for method_route, by_status in ingress.get("by_route", {}).items():
        method, _, route = method_route.partition(" ")
        for status, n in by_status.items():
            family.add_metric([method, route, status], n)
    return family


def _schema_checks(ingress: dict[str, Any]) -> Metric:
    family = CounterMetricFamily(
        "ominix_ingress_schema_checks",
        "Structured answers this ingress replica checked against their JSON Schemas, by result",
        labels=["model", "result"],
    )
    for model, by_result in ingress.get("schema_checks", {}).items():
        for result, n in by_result.items():
            family.add_metric([model, result], n)
    return family


def _slot_families(slot: str, answer: dict[str, Any]) -> Iterator[Metric]:
    replica = str(answer.get("replica", ""))
    families: dict[str, UnknownMetricFamily] = {}
    for model, figures in answer.get("models", {}).items():
        for key, value in _numbers(figures):
            name = f"ominix_{_name(slot)}_{_name(key)}"
            if name not in families:
                families[name] = UnknownMetricFamily(name, f"{slot} slot: {key}", labels=["model", "replica"])
            families[name].add_metric([model, replica], value)
    yield from families.values()


def _numbers(figures: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """The numbers of a summary, nested ones flattened (`prefix_cache` -> `prefix_cache_hits`);
    text (a model's weight format) has no place in a sample and is left out."""
    for key, value in figures.items():
        if isinstance(value, dict):
            yield from _numbers(value, f"{prefix}{key}_")
        elif isinstance(value, (int, float)):  # bool too: 0 or 1
            yield f"{prefix}{key}", float(value)


def _name(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)
