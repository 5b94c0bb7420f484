"""The graph's figures in a real Prometheus server (docs/metrics.md): Debian's `prometheus`,
started on loopback with a scrape config for Ray's metrics export of the session graph's
cluster (the service discovery file Ray writes in its session directory) and for the ingress's
`/metrics?format=prometheus`. After a chat, a transcription and a speech request, PromQL through
Prometheus' HTTP API returns the graph's series, with their tags, and non-zero values.

Ray exports on its own period (RAY_metrics_report_interval_ms, 10 s by default), so the queries
are polled, bounded by DEADLINE_S. Skipped only when the prometheus binary is not installed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml

from deployments.llm.slot import SLOT as LLM_SLOT
from deployments.ray_internals import session_dir
from deployments.tts.tiny_model import TINY_TTS_ID
from tests.speech import encode, speak

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="the prometheus binary is not installed (apt-get install prometheus)"
)

ROOT = Path(__file__).resolve().parents[2]
GRAPH_ARGS = yaml.safe_load((ROOT / "serve_config.yaml").read_text())["applications"][0]["args"]
LLM_DEFAULT = GRAPH_ARGS["llm"]["default_model"]  # loaded at start: the chat loads nothing
DEADLINE_S = 60  # two of Ray's report periods and more, after the requests
SCRAPE_INTERVAL = "2s"  # the timeout too: a loaded 2-core box can take over 1 s to answer
SERVICE_DISCOVERY = "prom_metrics_service_discovery.json"  # ray/_private/ray_constants.py


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(check, what: str, timeout_s: float):
    """`check()`'s first truthy answer, polled every 0.5 s until `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not there after {timeout_s:.0f} s (last answer: {last!r})")


@pytest.fixture(scope="module")
def prometheus(server, ray_cluster, tmp_path_factory):
    """Base URL of a Prometheus server scraping the session graph's Ray node(s) and its ingress."""
    work = tmp_path_factory.mktemp("prometheus")
    discovery = session_dir() / SERVICE_DISCOVERY  # the dashboard writes it; it names every node's export
    _wait_for(discovery.exists, f"Ray's {discovery}", 30)
    ingress = server.removeprefix("http://")
    config = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [
            {"job_name": "ray", "file_sd_configs": [{"files": [str(discovery)], "refresh_interval": "1s"}]},
            {
                "job_name": "ominix-ingress",
                "metrics_path": "/metrics",
                "params": {"format": ["prometheus"]},
                "static_configs": [{"targets": [ingress]}],
            },
        ],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = work / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(lambda: _ready(url, proc, log), "Prometheus ready", 30)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _ready(url: str, proc: subprocess.Popen, log: Path) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"prometheus exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _query(prometheus: str, promql: str) -> list[dict]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def _positive(prometheus: str, promql: str) -> list[dict]:
    """The query's series once one has a value above zero ([] until then)."""
    result = _query(prometheus, promql)
    return result if any(float(s["value"][1]) > 0 for s in result) else []


@pytest.fixture(scope="module")
def served(server, client, http):
    """A chat, a transcription and a speech request through the session graph."""
    chat = client.chat.completions.create(
        messages=[{"role": "user", "content": "Name a color."}], model=LLM_DEFAULT, max_tokens=8, temperature=0
    )
    assert chat.usage.completion_tokens > 0
    audio = encode(speak("Hello world, this is a test."), 16000, "wav")
    transcription = http.post("/v1/audio/transcriptions", files={"file": ("hello.wav", audio)})
    assert transcription.status_code == 200, transcription.text
    speech = http.post(
        "/v1/audio/speech",
        json={"model": TINY_TTS_ID, "voice": "alba", "input": "Hello there.", "response_format": "pcm"},
    )
    assert speech.status_code == 200 and len(speech.content) > 0, speech.text
    return {"llm_model": chat.model}


def test_ray_exports_the_graphs_figures_with_their_tags(prometheus, served):
    queries = {
        "LLM tokens generated": "sum(ray_ominix_llm_generated_tokens_total)",
        "LLM prompt tokens": "sum(ray_ominix_llm_prompt_tokens_total)",
        "LLM time to first token": "sum(ray_ominix_llm_time_to_first_token_ms_count)",
        "ASR audio seconds": "sum(ray_ominix_asr_audio_seconds_total)",
        "ASR real-time factor": "sum(ray_ominix_asr_real_time_factor_count)",
        "TTS audio seconds": "sum(ray_ominix_tts_audio_seconds_total)",
        "TTS time to first audio": "sum(ray_ominix_tts_time_to_first_audio_ms_count)",
        "models loaded": "sum(ray_ominix_model_loaded)",
        "replica memory": 'sum(ray_ominix_replica_memory_bytes{kind="rss"})',
        "ingress requests": "sum(ray_ominix_requests_total)",
    }
    deadline = time.monotonic() + DEADLINE_S
    for what, promql in queries.items():
        _wait_for(lambda q=promql: _positive(prometheus, q), what, max(1.0, deadline - time.monotonic()))
    # Each series names the deployment, the replica and the model that served it.
    series = _query(prometheus, "ray_ominix_llm_generated_tokens_total")
    tagged = [s["metric"] for s in series if float(s["value"][1]) > 0]
    assert any(
        m.get("deployment") == LLM_SLOT.deployment_name and m.get("replica") and m.get("model") == served["llm_model"]
        for m in tagged
    ), tagged


def test_the_ingress_exposition_is_scraped_too(prometheus, served):
    llm = _wait_for(
        # Each scrape asks one LLM replica: over the last minute, the one that served counts.
        lambda: _positive(prometheus, 'max_over_time(ominix_llm_completion_tokens{job="ominix-ingress"}[1m])'),
        "the ingress's LLM tokens",
        DEADLINE_S,
    )
    assert {s["metric"]["model"] for s in llm} >= {served["llm_model"]}
    # The ingress's own counts are its replica's (the shipped graph runs one ingress replica);
    # a slot's figures come from the one replica that answered the summary.
    assert _positive(
        prometheus, 'ominix_ingress_requests_total{job="ominix-ingress",route="/v1/audio/speech",status="200"}'
    )
    up = _query(prometheus, 'up{job="ominix-ingress"}')
    assert [float(s["value"][1]) for s in up] == [1.0]
