"""GET /metrics in Prometheus' text format and OpenMetrics beside the JSON summary
(deployments/ingress/prometheus.py), parsed back with prometheus_client's own parsers."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tests.ingress.conftest import default_slots

LLM_SUMMARY = {
    "replica": "r-llm-1",
    "models": {
        "ominix-tiny-qwen3": {
            "requests": 2.0,
            "completion_tokens": 9.0,
            "ttft_count": 2.0,
            "ttft_ms_mean": 12.5,
            "running": 0,
            "weights": "float32",  # text: no sample
            "prefix_cache": {"hits": 1, "entries": 3},  # nested: flattened
        }
    },
}
ASR_SUMMARY = {"replica": "r-asr-1", "models": {"whisper-tiny.en": {"audio_seconds": 4.5, "requests": 1.0}}}


@pytest.fixture
def slots():
    slots = default_slots()
    slots["llm"].answers["metrics_summary"] = lambda model=None: LLM_SUMMARY
    slots["asr"].answers["metrics_summary"] = lambda model=None: ASR_SUMMARY
    return slots  # the other slots do not answer the summary


def samples(families) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


async def chat(http):
    r = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200


async def test_the_json_summary_stays_the_default(http):
    await chat(http)
    for headers in ({}, {"Accept": "application/json"}, {"Accept": "*/*"}, {"Accept": "text/plain, application/json"}):
        r = await http.get("/metrics", headers=headers)
        assert r.headers["content-type"] == "application/json", headers
        body = r.json()
        assert body["ingress"]["by_route"]["POST /v1/chat/completions"] == {"200": 1}
        assert body["llm"] == LLM_SUMMARY and "error" in body["tts"]


@pytest.mark.parametrize("how", [{"params": {"format": "prometheus"}}, {"headers": {"Accept": "text/plain"}}])
async def test_prometheus_text_parses_back_to_the_summarys_figures(http, how):
    await chat(http)
    r = await http.get("/metrics", **how)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = list(parse_text(r.text))
    kinds = {f.name: f.type for f in families}
    got = samples(families)
    assert kinds["ominix_ingress_requests"] == "counter"
    chat_route = (("method", "POST"), ("route", "/v1/chat/completions"), ("status", "200"))
    assert got[("ominix_ingress_requests_total", chat_route)] == 1
    llm = (("model", "ominix-tiny-qwen3"), ("replica", "r-llm-1"))
    assert got[("ominix_llm_completion_tokens", llm)] == 9
    assert got[("ominix_llm_ttft_ms_mean", llm)] == 12.5
    assert got[("ominix_llm_prefix_cache_hits", llm)] == 1
    assert not any(name.startswith("ominix_llm_weights") for name, _ in got)
    assert got[("ominix_asr_audio_seconds", (("model", "whisper-tiny.en"), ("replica", "r-asr-1")))] == 4.5
    assert got[("ominix_slot_up", (("slot", "llm"),))] == 1
    assert got[("ominix_slot_up", (("slot", "tts"),))] == 0  # it did not answer


async def test_openmetrics_for_a_prometheus_server(http):
    await chat(http)
    # What Prometheus sends when it scrapes (scrape/scrape.go's acceptHeader).
    accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    r = await http.get("/metrics", headers={"Accept": accept})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")
    got = samples(parse_openmetrics(r.text))
    assert got[("ominix_llm_requests", (("model", "ominix-tiny-qwen3"), ("replica", "r-llm-1")))] == 2
    r2 = await http.get("/metrics", params={"format": "openmetrics"})
    assert r2.headers["content-type"] == r.headers["content-type"]


async def test_an_unknown_format_is_a_400(http):
    r = await http.get("/metrics", params={"format": "xml"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "format"
