"""The shipped Grafana dashboard (docs/grafana/ominix-serve.json) and the metrics page
(docs/metrics.md) against the metrics the code declares (tests/unit/metrics_catalog.py): the
dashboard has the structure Grafana imports, every PromQL expression names series Ray exports,
the figures the graph is watched by have a panel, and the page lists every metric. With
Prometheus' `promtool` installed, every expression is parsed by Prometheus itself."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.metrics_catalog import ALL_METRICS, prometheus_names

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "ominix-serve.json"
PAGE = ROOT / "docs" / "metrics.md"
EXPORTED = {name for spec in ALL_METRICS for name in prometheus_names(spec)}
# The figures a panel must show (the LLM, ASR, TTS, other slots, replicas, ingress).
WATCHED = {
    "ominix_llm_generated_tokens",
    "ominix_llm_prompt_tokens",
    "ominix_llm_time_to_first_token_ms",
    "ominix_llm_inter_token_latency_ms",
    "ominix_llm_running_sequences",
    "ominix_llm_queued_sequences",
    "ominix_llm_prefix_cache_hits",
    "ominix_asr_audio_seconds",
    "ominix_asr_real_time_factor",
    "ominix_asr_live_sessions",
    "ominix_tts_audio_seconds",
    "ominix_tts_time_to_first_audio_ms",
    "ominix_tts_real_time_factor",
    "ominix_image_latency_ms",
    "ominix_vlm_latency_ms",
    "ominix_embeddings_latency_ms",
    "ominix_model_loaded",
    "ominix_replica_memory_bytes",
    "ominix_requests",
}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def graph_panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def expressions() -> list[str]:
    return [t["expr"] for p in graph_panels() for t in p["targets"]]


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"\b(ray_ominix_[a-z0-9_]+)", expr))


def test_the_dashboard_has_the_structure_grafana_imports():
    d = dashboard()
    assert d["title"] and d["uid"] and isinstance(d["schemaVersion"], int)
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in graph_panels():
        assert p["type"] == "timeseries" and p["title"], p
        assert set(p["gridPos"]) == {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["targets"], p["title"]
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(ref_ids) == len(set(ref_ids)) and all(t["expr"].strip() for t in p["targets"])


def test_every_expression_names_series_ray_exports():
    for expr in expressions():
        names = referenced(expr)
        assert names, expr
        assert names <= EXPORTED, (expr, names - EXPORTED)


def test_every_watched_figure_has_a_panel():
    shown = {name for expr in expressions() for name in referenced(expr)}
    for metric in WATCHED:
        spec = next(s for s in ALL_METRICS if s.name == metric)
        assert set(prometheus_names(spec)) & shown, metric


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus package) is not installed")
def test_prometheus_parses_every_expression(tmp_path):
    """Grafana's variables replaced by what they stand for, each expression as a recording rule."""

    def concrete(expr: str) -> str:
        return expr.replace("$__rate_interval", "1m").replace("$model", ".*")

    rules = [{"record": f"ominix:dashboard:{i}", "expr": concrete(e)} for i, e in enumerate(expressions())]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_metrics_page_lists_every_metric():
    page = PAGE.read_text()
    missing = [spec.name for spec in ALL_METRICS if f"`ray_{spec.name}" not in page]
    assert not missing, missing
