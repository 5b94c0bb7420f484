"""API keys, CORS and limits on a live graph.

A second application with API keys is deployed into the session's cluster next to the shipped
(keyless, loopback) one, so both modes are checked without another Ray start.
"""

from __future__ import annotations

import httpx
import openai
import pytest

KEY = "test-key-123"


@pytest.fixture(scope="module")
def keyed_url(server, cache_dir):
    from ray import serve

    from graphs.omni import build_app

    off = {"enabled": False}  # no slot is needed to check the keys
    app = build_app({"cache_dir": str(cache_dir), "security": {"api_keys": [KEY]}, "llm": off, "asr": off, "tts": off, "image": off})
    serve.run(app, name="keyed", route_prefix="/keyed", blocking=False)
    url = f"{server}/keyed"
    for _ in range(120):
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        import time

        time.sleep(0.5)
    yield url
    serve.delete("keyed")


def test_keyed_app_requires_the_key(keyed_url):
    r = httpx.get(f"{keyed_url}/v1/models")
    assert r.status_code == 401
    assert r.json()["error"] == {
        "message": "invalid api key",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
    }
    assert r.headers["www-authenticate"] == "Bearer"
    wrong = httpx.get(f"{keyed_url}/v1/models", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "nope" not in wrong.text
    client = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=KEY, max_retries=0)
    assert client.models.list().data == []
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{keyed_url}/v1", api_key="bad", max_retries=0).models.list()


def test_probes_and_docs_stay_public(keyed_url):
    assert httpx.get(f"{keyed_url}/health").status_code == 200
    assert httpx.get(f"{keyed_url}/openapi.json").status_code == 200


def test_keyed_app_sends_no_wildcard_cors(keyed_url):
    r = httpx.get(f"{keyed_url}/health", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_keyless_loopback_app_allows_browser_pages(http):
    r = http.get("/health", headers={"Origin": "http://localhost:3000"})
    assert r.headers["access-control-allow-origin"] == "*"


def test_oversized_chat_body_is_413(http):
    r = http.post(
        "/v1/chat/completions",
        content=b'{"messages": [{"role": "user", "content": "' + b"x" * (21 * 1024 * 1024) + b'"}]}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


def test_oversized_body_on_a_small_route_is_413(http):
    r = http.post("/v1/models", content=b"x" * (2 * 1024 * 1024))
    assert r.status_code == 413


def test_metrics_summary_counts_requests_and_tokens(http, client):
    client.chat.completions.create(
        model="ominix-tiny-qwen3", messages=[{"role": "user", "content": "count me"}], max_tokens=5, temperature=0
    )
    http.get("/v1/no-such-route")
    summary = http.get("/metrics").json()
    routes = summary["ingress"]["by_route"]
    assert routes["POST /v1/chat/completions"]["200"] >= 1
    assert routes["GET (unmatched)"]["404"] >= 1
    llm = summary["llm"]["ominix-tiny-qwen3"]
    assert llm["completion_tokens"] >= 5 and llm["prompt_tokens"] > 0
    assert llm["ttft_count"] >= 1 and llm["ttft_ms_mean"] > 0


def test_metrics_are_behind_the_key(keyed_url):
    assert httpx.get(f"{keyed_url}/metrics").status_code == 401
    assert httpx.get(f"{keyed_url}/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
