"""The remote-CUDA route end to end: a second application of the real graph (built by
`build_app` with a `cuda:` route) deployed next to the session graph, pointing at a fake
worker-v0 shim on loopback, driven with the openai SDK and httpx.

The session graph itself has no CUDA route; its /readyz and /v1/models/status are checked too.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.assertions import only_slots
from tests.fake_worker import FakeWorker

pytestmark = pytest.mark.slow

APP_NAME = "ominix-cuda"
PUBLIC = "qwen3-8b-cuda"
ALIAS = "Qwen3-8B-remote"
SERVED = "Qwen/Qwen3-8B"
LOCAL = "ominix-tiny-qwen3"
DEFAULT = "ominix-smollm2-135m-instruct"  # the session graph's LLM
TIMEOUT_S = 4
PING = [{"role": "user", "content": "ping"}]
UNSUPPORTED = "The selected CUDA model does not support this request"
FAILED = "The CUDA inference backend failed"
TIMED_OUT = "The CUDA inference backend timed out"


@pytest.fixture(scope="module")
def worker():
    w = FakeWorker(token="e2e-secret", served_model=SERVED).start()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def cuda_url(server, worker, cache_dir):
    from ray import serve

    from graphs.omni import build_app

    args = {
        "cache_dir": str(cache_dir),
        "llm": {"default_model": LOCAL},  # the local side only needs a code path
        **only_slots("llm"),  # the other slots have nothing to do with this route
        "cuda": {
            "scheduler_url": worker.url,
            "scheduler_token": worker.token,
            "scheduler_models": [PUBLIC, ALIAS],
            "served_model": SERVED,
            "scheduler_timeout_secs": TIMEOUT_S,
            "chat_template_kwargs": {"enable_thinking": False},
        },
    }
    serve.run(build_app(args), name=APP_NAME, route_prefix="/cuda")
    try:
        yield f"{server}/cuda"
    finally:
        serve.delete(APP_NAME)


@pytest.fixture
def fresh(worker):
    worker.reset()
    yield worker
    # A request that failed upstream is aborted after its answer went out: let its abort land
    # here, not in the next test's list (CI once saw a 502 test's abort in the next test's).
    # The worker knows which requests it answered badly; a clean one is never aborted.
    deadline = time.time() + 5
    while len(worker.aborts) < len(worker.unclean) and time.time() < deadline:
        time.sleep(0.02)


@pytest.fixture(scope="module")
def cuda_client(cuda_url):
    return openai.OpenAI(base_url=f"{cuda_url}/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def cuda_http(cuda_url):
    with httpx.Client(base_url=cuda_url, timeout=60) as c:
        yield c


def sse_events(raw: str) -> list[str]:
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events), raw
    return [e[len("data: ") :] for e in events]


def post_stream(http: httpx.Client, body: dict) -> tuple[httpx.Response, list[str]]:
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        raw = r.read().decode()
    return r, sse_events(raw) if r.status_code == 200 else []


def assert_upstream_error(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert (error["message"], error["type"]) == (message, "upstream_error")


def settle_aborts(worker: FakeWorker, expected: int, timeout: float = 5.0) -> list[dict]:
    deadline = time.time() + timeout
    while len(worker.aborts) < expected and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.2)  # and no extra one
    return worker.aborts


# ---- the session graph: no CUDA route ------------------------------------------------------


def test_readyz_without_cuda_route(http):
    r = http.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "ready" and r.json()["sglang_cuda"] == {"configured": False}
    status = http.get("/v1/models/status").json()
    assert status["status"] == "success" and status["models"]["llm"] == DEFAULT
    assert status["sglang_cuda"] == {"configured": False, "models": [], "shim_reachable": False, "model_ready": False}


# ---- the pong contract (OminiX-SGLang's cross-repo test) -------------------------------------


def test_readyz_and_models_when_worker_ready(cuda_http, fresh):
    r = cuda_http.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ready"
    assert r.json()["sglang_cuda"] == (
        {
            "configured": True,
            "models": sorted([PUBLIC, ALIAS]),
            "served_model": SERVED,
            "shim_reachable": True,
            "model_ready": True,
        }
    )
    models = cuda_http.get("/v1/models").json()["data"]
    # then the LLM slot's aliases (OminiX-API's family names), which name local models only
    assert [m["id"] for m in models if not m.get("alias_of")] == sorted([PUBLIC, ALIAS]) + [LOCAL]
    cuda_card = next(m for m in models if m["id"] == PUBLIC)
    assert cuda_card["owned_by"] == "ominix-sglang" and cuda_card["backend"] == "cuda-worker-v0"
    assert cuda_card["type"] == "llm" and cuda_card["endpoints"] == ["/v1/chat/completions"]
    assert cuda_http.get(f"/v1/models/{PUBLIC}").json()["backend"] == "cuda-worker-v0"
    assert cuda_http.get("/v1/models/status").json()["sglang_cuda"]["model_ready"] is True
    assert fresh.unauthorized == 0


def test_pong_non_streaming(cuda_client, fresh):
    r = cuda_client.chat.completions.create(model=PUBLIC, messages=PING, max_tokens=8)
    assert r.choices[0].message.content == "pong"
    assert r.model == PUBLIC and r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == 7
    [sent] = fresh.generate_requests
    assert sent["model"] == SERVED and sent["input"]["messages"] == PING
    assert sent["sampling"] == {"max_new_tokens": 8}
    assert sent["input"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert r.id == f"chatcmpl-{sent['request_id']}"


def test_pong_streaming(cuda_client, cuda_http, fresh):
    chunks = list(cuda_client.chat.completions.create(model=ALIAS, messages=PING, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "pong"
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.total_tokens == 7
    assert {c.model for c in chunks} == {ALIAS}
    assert fresh.generate_requests[0]["model"] == SERVED

    r, events = post_stream(cuda_http, {"model": PUBLIC, "messages": PING})
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert events[-1] == "[DONE]"
    first, final = json.loads(events[0]), json.loads(events[-2])
    assert first["choices"][0]["delta"] == {"role": "assistant"}
    assert final["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}
    assert final["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    assert settle_aborts(fresh, 0, timeout=0) == []


# ---- routing -------------------------------------------------------------------------------


def test_unmapped_ids_stay_local(cuda_client, cuda_http, fresh):
    r = cuda_client.chat.completions.create(model=LOCAL, messages=PING, max_tokens=3, temperature=0)
    assert r.model == LOCAL and r.usage.completion_tokens == 3
    # exact, case-sensitive matching: a near miss is not routed (and not served either)
    with pytest.raises(openai.NotFoundError):
        cuda_client.chat.completions.create(model=PUBLIC.upper(), messages=PING)
    # a local-only parameter check still applies to local ids
    r = cuda_http.post("/v1/chat/completions", json={"model": LOCAL, "messages": PING, "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    assert fresh.generate_requests == []


# ---- 6.4: unsupported requests are 400 before the worker is called ---------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": 0},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"tool_choice": "auto"},
        {"tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"response_format": {"type": "json_object"}},
        {"messages": [*PING, {"role": "tool", "content": "1", "tool_call_id": "c"}]},
        {"messages": [{"role": "user", "content": "x", "tool_call_id": "c"}]},
        {
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                },
                *PING,
            ]
        },
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "ping"}]}]},
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]}
            ]
        },
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_unsupported_requests_are_400(cuda_http, fresh, fields, stream):
    body = {"model": PUBLIC, "messages": PING, "stream": stream, **fields}
    assert_upstream_error(cuda_http.post("/v1/chat/completions", json=body), 400, UNSUPPORTED)
    assert fresh.generate_requests == []


def test_tool_choice_none_is_supported(cuda_client, fresh):
    r = cuda_client.chat.completions.create(model=PUBLIC, messages=PING, tool_choice="none")
    assert r.choices[0].message.content == "pong"


def test_malformed_cuda_request_is_400(cuda_http, fresh):
    r = cuda_http.post("/v1/chat/completions", json={"model": PUBLIC, "messages": [{"role": "user", "content": 3}]})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert fresh.generate_requests == []


# ---- 6.6: error mapping before streaming -------------------------------------------------------


@pytest.mark.parametrize(
    "status, expected, message",
    [
        (400, 400, UNSUPPORTED),
        (422, 400, UNSUPPORTED),
        (408, 504, TIMED_OUT),
        (504, 504, TIMED_OUT),
        (401, 503, FAILED),
        (403, 503, FAILED),
        (429, 503, FAILED),
        (503, 503, FAILED),
        (500, 502, FAILED),
        (404, 502, FAILED),
    ],
)
def test_worker_status_mapping(cuda_http, fresh, status, expected, message):
    fresh.generate_status = status
    assert_upstream_error(
        cuda_http.post("/v1/chat/completions", json={"model": PUBLIC, "messages": PING}), expected, message
    )
    r, _ = post_stream(cuda_http, {"model": PUBLIC, "messages": PING})
    assert_upstream_error(r, expected, message)
    ids = [g["request_id"] for g in fresh.generate_requests]
    assert sorted(a["request_id"] for a in settle_aborts(fresh, 2)) == sorted(ids)


def test_timeout_is_504(cuda_http, fresh):
    fresh.behaviour, fresh.slow_s = "slow", TIMEOUT_S + 2
    started = time.monotonic()
    assert_upstream_error(
        cuda_http.post("/v1/chat/completions", json={"model": PUBLIC, "messages": PING}), 504, TIMED_OUT
    )
    assert time.monotonic() - started < TIMEOUT_S + 1.5
    assert len(settle_aborts(fresh, 1)) == 1


@pytest.mark.parametrize("behaviour", ["fake_mode", "wrong_model", "not_generation", "probe_401"])
def test_worker_not_ready(cuda_http, fresh, behaviour):
    fresh.behaviour = behaviour
    r = cuda_http.get("/readyz")
    assert r.status_code == 503
    body = r.json()
    assert body["status"] == "not_ready" and body["sglang_cuda"]["model_ready"] is False
    assert body["sglang_cuda"]["shim_reachable"] is True and body["sglang_cuda"]["reason"]
    assert [m["id"] for m in cuda_http.get("/v1/models").json()["data"] if not m.get("alias_of")] == [LOCAL]
    assert_upstream_error(cuda_http.post("/v1/chat/completions", json={"model": PUBLIC, "messages": PING}), 503, FAILED)
    assert fresh.generate_requests == []


@pytest.mark.parametrize(
    "behaviour, stream_message",
    [
        ("malformed_sse", "CUDA inference stream was invalid"),
        ("missing_done", "CUDA inference stream ended prematurely"),
        ("events_after_done", FAILED),
        ("wrong_request_id", FAILED),
        ("error_event", FAILED),
    ],
)
def test_bad_worker_streams(cuda_http, fresh, behaviour, stream_message):
    fresh.behaviour = behaviour
    body = {"model": PUBLIC, "messages": PING}
    assert_upstream_error(cuda_http.post("/v1/chat/completions", json=body), 502, FAILED)
    r, events = post_stream(cuda_http, body)
    assert r.status_code == 200  # the stream had started: the error is reported inside it
    assert json.loads(events[0])["choices"][0]["delta"] == {"role": "assistant"}
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert (error["message"], error["type"], error["code"]) == (stream_message, "upstream_error", None)
    assert len(settle_aborts(fresh, 2)) == 2


def test_wrong_content_type_is_502(cuda_http, fresh):
    fresh.behaviour = "json_content_type"
    r, _ = post_stream(cuda_http, {"model": PUBLIC, "messages": PING})
    assert_upstream_error(r, 502, FAILED)


# ---- abort -----------------------------------------------------------------------------------


def test_client_disconnect_aborts_the_worker_request(cuda_http, fresh):
    fresh.behaviour, fresh.slow_s = "endless", TIMEOUT_S - 0.5
    body = {"model": PUBLIC, "messages": PING, "stream": True}
    with cuda_http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if "tick" in line:
                break
        disconnected = time.monotonic()
    aborts = settle_aborts(fresh, 1)
    assert time.monotonic() - disconnected < 2.5, "abort must follow the disconnect, not the timeout"
    assert [a["request_id"] for a in aborts] == [fresh.generate_requests[0]["request_id"]]
    assert aborts[0]["reason"] == "client_disconnect_or_upstream_failure"


def test_client_disconnect_aborts_a_non_streaming_request(cuda_url, fresh):
    fresh.behaviour, fresh.slow_s = "slow", TIMEOUT_S - 1  # would answer cleanly if left alone
    body = {"model": PUBLIC, "messages": PING}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{cuda_url}/v1/chat/completions", json=body, timeout=httpx.Timeout(60, read=1))
    aborts = settle_aborts(fresh, 1, timeout=4)
    assert [a["request_id"] for a in aborts] == [fresh.generate_requests[0]["request_id"]]


# ---- the worker stops --------------------------------------------------------------------------


def test_503_once_the_worker_stops(cuda_client, cuda_http, fresh):
    assert cuda_http.get("/readyz").status_code == 200
    fresh.stop()
    try:
        r = cuda_http.get("/readyz")
        assert r.status_code == 503
        assert r.json()["sglang_cuda"]["shim_reachable"] is False
        with pytest.raises(openai.InternalServerError) as info:
            cuda_client.chat.completions.create(model=PUBLIC, messages=PING)
        assert info.value.status_code == 503
        # never a local fallback for a mapped id, and local ids keep working
        assert cuda_client.chat.completions.create(model=LOCAL, messages=PING, max_tokens=2).model == LOCAL
    finally:
        fresh.start()
