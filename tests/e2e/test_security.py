"""API keys, CORS and limits on a live graph.

A second application with API keys is deployed into the session's cluster next to the shipped
(keyless, loopback) one, so both modes are checked without another Ray start.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import websockets

from tests.assertions import only_slots, ws_tts_audio

KEY = "test-key-123"


@pytest.fixture(scope="module")
def keyed_url(server, cache_dir):
    from ray import serve

    from graphs.omni import build_app

    # The keys need no model; the TTS slot is there for the WebSocket.
    app = build_app({"cache_dir": str(cache_dir), "security": {"api_keys": [KEY]}, **only_slots("tts")})
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
    models = [m.id for m in client.models.list().data if not m.model_extra.get("alias_of")]
    assert models == ["ominix-tiny-pocket-tts"]  # the keyed app's one slot
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
    llm = summary["llm"]["models"]["ominix-tiny-qwen3"]
    assert llm["completion_tokens"] >= 5 and llm["prompt_tokens"] > 0
    assert llm["ttft_count"] >= 1 and llm["ttft_ms_mean"] > 0


def test_metrics_are_behind_the_key(keyed_url):
    assert httpx.get(f"{keyed_url}/metrics").status_code == 401
    assert httpx.get(f"{keyed_url}/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


# ------------------------------------------------------------------ WebSocket auth, through Serve's proxy


def _ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://") + "/ws/v1/tts"


async def _synthesizes(ws) -> bytes:
    assert json.loads(await ws.recv()) == {"event": "connected_success"}
    await ws.send(json.dumps({"event": "task_continue", "text": "Hello there, keyed world."}))
    return await ws_tts_audio(ws)


@pytest.mark.parametrize(
    "credentials",
    [
        {},
        {"additional_headers": {"Authorization": "Bearer nope"}},
        {"subprotocols": ["bearer", "nope"]},
        {"subprotocols": ["nope", KEY]},
        {"additional_headers": {"Authorization": KEY}},
    ],
    ids=["none", "wrong-header", "wrong-subprotocol", "key-without-bearer-protocol", "header-without-bearer"],
)
async def test_websocket_without_a_valid_key_is_refused_at_the_upgrade(keyed_url, credentials):
    """The upgrade request is answered 401 with the OpenAI body: no socket, no work."""
    with pytest.raises(websockets.InvalidStatus) as info:
        async with websockets.connect(_ws_url(keyed_url), **credentials):
            pass
    response = info.value.response
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert json.loads(response.body)["error"]["code"] == "invalid_api_key"
    assert b"nope" not in response.body


async def test_websocket_with_the_key_in_the_authorization_header(keyed_url):
    async with websockets.connect(_ws_url(keyed_url), additional_headers={"Authorization": f"Bearer {KEY}"}) as ws:
        assert ws.subprotocol is None  # nothing offered, nothing chosen
        assert len(await _synthesizes(ws)) > 0


async def test_websocket_with_the_browser_bearer_subprotocol(keyed_url):
    """`new WebSocket(url, ["bearer", key])`: the server must pick `bearer`, or browsers drop it."""
    async with websockets.connect(_ws_url(keyed_url), subprotocols=["bearer", KEY]) as ws:
        assert ws.subprotocol == "bearer"
        assert ws.response.headers["Sec-WebSocket-Protocol"] == "bearer"
        assert len(await _synthesizes(ws)) > 0


# ------------------------------------------------------------------ audio metrics


def _slot_totals(http, slot: str, model: str, polls: int = 20) -> dict[str, dict]:
    """{replica id: that replica's totals for `model`}: each GET /metrics asks one replica."""
    seen = {}
    for _ in range(polls):
        summary = http.get("/metrics").json()[slot]
        seen[summary["replica"]] = summary["models"].get(model, {})
    return seen


def _grown(before: dict[str, dict], after: dict[str, dict], key: str) -> list[tuple[dict, float]]:
    return [
        (totals, totals.get(key, 0) - before.get(replica, {}).get(key, 0))
        for replica, totals in after.items()
        if totals.get(key, 0) > before.get(replica, {}).get(key, 0)
    ]


def test_metrics_count_audio_seconds_in_and_out_and_time_to_first_audio(http):
    import io

    import numpy as np
    import soundfile as sf

    from deployments.audio.encode import encode_wav

    asr_model, tts_model, seconds = "ominix-tiny-whisper", "ominix-tiny-pocket-tts", 2.5
    asr_before, tts_before = _slot_totals(http, "asr", asr_model), _slot_totals(http, "tts", tts_model)
    tone = (0.3 * np.sin(2 * np.pi * 330 * np.arange(int(seconds * 22050)) / 22050)).astype(np.float32)
    r = http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", encode_wav(tone, 22050))}, data={"model": asr_model}
    )
    assert r.status_code == 200, r.text
    text = "Metrics count this sentence. And this one too!"
    speech = http.post(
        "/v1/audio/speech", json={"model": tts_model, "input": text, "voice": "alba", "response_format": "wav"}
    )
    assert speech.status_code == 200
    samples, rate = sf.read(io.BytesIO(speech.content))
    spoken = len(samples) / rate

    [(asr, asr_seconds)] = _grown(asr_before, _slot_totals(http, "asr", asr_model), "audio_seconds")
    assert asr_seconds == pytest.approx(seconds, abs=0.01)  # resampled 22.05 -> 16 kHz: same duration
    assert asr["latency_count"] >= 1 and asr["latency_ms_mean"] > 0
    [(tts, tts_seconds)] = _grown(tts_before, _slot_totals(http, "tts", tts_model), "audio_seconds")
    assert tts_seconds == pytest.approx(spoken, abs=1e-3) and spoken > 0
    assert tts["characters"] >= len(text) and tts["ttfa_count"] >= 1 and tts["ttfa_ms_mean"] > 0
