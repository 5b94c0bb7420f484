"""The shim client against a fake worker-v0 shim on a real loopback socket (no Ray)."""

from __future__ import annotations

import asyncio
import time

import pytest

from deployments.cuda_proxy.client import ShimClient
from deployments.cuda_proxy.config import CudaRoute
from deployments.cuda_proxy.protocol import CudaChatRequest
from deployments.protocol.errors import APIError
from tests.fake_worker import FakeWorker, free_port

PUBLIC = "qwen3-8b-cuda"
FAILED = "The CUDA inference backend failed"


@pytest.fixture(scope="module")
def worker():
    w = FakeWorker().start()
    yield w
    w.stop()


@pytest.fixture
def fresh(worker):
    worker.reset()
    return worker


def make_route(worker: FakeWorker, **changes) -> CudaRoute:
    fields = dict(
        base_url=worker.url,
        token=worker.token,
        models=(PUBLIC, "alias"),
        served_model=worker.served_model,
        timeout_s=10,
        chat_template_kwargs={"enable_thinking": False},
    )
    return CudaRoute(**{**fields, **changes})


@pytest.fixture
async def shim(fresh):
    client = ShimClient(make_route(fresh))
    yield client
    await client.aclose()


def chat(stream=False, **fields) -> CudaChatRequest:
    body = {"model": PUBLIC, "messages": [{"role": "user", "content": "ping"}], "stream": stream, **fields}
    return CudaChatRequest.model_validate(body)


async def collect(shim: ShimClient, request: CudaChatRequest):
    return [c async for c in shim.stream(request)]


async def settle(worker: FakeWorker = None, expected: int = 0):
    """Let fire-and-forget aborts reach the worker (and give an unexpected one time to come)."""
    deadline = time.monotonic() + 3
    while worker is not None and len(worker.aborts) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)


# ---- readiness -------------------------------------------------------------------------------


async def test_ready_worker(shim, fresh):
    status = await shim.readiness()
    assert status == {
        "configured": True,
        "models": ["alias", PUBLIC],
        "served_model": fresh.served_model,
        "shim_reachable": True,
        "model_ready": True,
    }
    assert fresh.unauthorized == 0


@pytest.mark.parametrize("behaviour", ["fake_mode", "wrong_model", "not_generation", "probe_401"])
async def test_reachable_but_not_ready(shim, fresh, behaviour):
    fresh.behaviour = behaviour
    status = await shim.readiness()
    assert status["shim_reachable"] is True and status["model_ready"] is False
    assert status["reason"]


async def test_wrong_token_is_never_ready(fresh):
    client = ShimClient(make_route(fresh, token="wrong"))
    status = await client.readiness()
    await client.aclose()
    assert status["shim_reachable"] and not status["model_ready"]
    assert "401" in status["reason"] and fresh.unauthorized == 1


async def test_unreachable_worker():
    client = ShimClient(make_route(FakeWorker(), base_url=f"http://127.0.0.1:{free_port()}"))
    status = await client.readiness()
    await client.aclose()
    assert status["shim_reachable"] is False and status["model_ready"] is False
    assert "unreachable" in status["reason"]


async def test_environment_proxies_are_ignored(fresh, monkeypatch):
    # A proxy that does not exist: if httpx used it, every probe would fail.
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("ALL_PROXY", f"http://127.0.0.1:{free_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    client = ShimClient(make_route(fresh))
    assert (await client.readiness())["model_ready"] is True
    await client.aclose()


# ---- the pong contract -----------------------------------------------------------------------


async def test_non_streaming_pong(shim, fresh):
    response = await shim.complete(chat(max_tokens=16, temperature=0.0))
    assert response.choices[0].message.content == "pong"
    assert response.choices[0].finish_reason == "stop"
    assert response.model == PUBLIC
    assert response.usage.model_dump() == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    [sent] = fresh.generate_requests
    assert sent["model"] == fresh.served_model and sent["stream"] is False
    assert response.id == f"chatcmpl-{sent['request_id']}"
    assert sent["sampling"] == {"max_new_tokens": 16, "temperature": 0.0}
    assert sent["input"]["chat_template_kwargs"] == {"enable_thinking": False}
    await settle()
    assert fresh.aborts == []  # a clean finish needs no abort


async def test_streaming_pong(shim, fresh):
    chunks = await collect(shim, chat(stream=True))
    assert chunks[0].choices[0].delta.model_dump() == {"role": "assistant"}
    assert [c.choices[0].delta.content for c in chunks[1:-1]] == ["po", "ng"]
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop" and last.choices[0].delta.model_dump() == {}
    assert last.usage.total_tokens == 7
    assert {c.id for c in chunks} == {f"chatcmpl-{fresh.generate_requests[0]['request_id']}"}
    assert {c.model for c in chunks} == {PUBLIC}
    assert fresh.generate_requests[0]["stream"] is True
    await settle()
    assert fresh.aborts == []


# ---- failures before any output: status + abort --------------------------------------------


async def test_unsupported_request_never_reaches_the_worker(shim, fresh):
    for request in (chat(max_tokens=0), chat(tools=[{"type": "function", "function": {"name": "f"}}], stream=True)):
        with pytest.raises(APIError) as info:
            if request.stream:
                await collect(shim, request)
            else:
                await shim.complete(request)
        assert info.value.status_code == 400
    assert fresh.generate_requests == []


@pytest.mark.parametrize(
    "status, expected",
    [
        (400, 400),
        (422, 400),
        (401, 503),
        (403, 503),
        (429, 503),
        (503, 503),
        (408, 504),
        (504, 504),
        (500, 502),
        (404, 502),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_generate_status_mapping(shim, fresh, status, expected, stream):
    fresh.generate_status = status
    with pytest.raises(APIError) as info:
        if stream:
            await collect(shim, chat(stream=True))
        else:
            await shim.complete(chat())
    assert info.value.status_code == expected and info.value.type == "upstream_error"
    await settle(fresh, 1)
    assert [a["request_id"] for a in fresh.aborts] == [fresh.generate_requests[0]["request_id"]]


@pytest.mark.parametrize("behaviour", ["fake_mode", "wrong_model", "not_generation", "probe_401"])
async def test_not_ready_is_503_without_generate(shim, fresh, behaviour):
    fresh.behaviour = behaviour
    with pytest.raises(APIError) as info:
        await shim.complete(chat())
    assert info.value.status_code == 503 and info.value.message == FAILED
    assert fresh.generate_requests == []


async def test_worker_down_is_503():
    client = ShimClient(make_route(FakeWorker(), base_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(APIError) as info:
        await client.complete(chat())
    await client.aclose()
    assert info.value.status_code == 503


async def test_timeout_is_504_and_aborts(fresh):
    fresh.behaviour, fresh.slow_s = "slow", 6
    client = ShimClient(make_route(fresh, timeout_s=1))
    started = time.monotonic()
    with pytest.raises(APIError) as info:
        await client.complete(chat())
    assert info.value.status_code == 504 and info.value.message == "The CUDA inference backend timed out"
    # answered on the 1 s timeout, not with the worker's answer at 6 s (room for a loaded CI box)
    assert time.monotonic() - started < 4.5
    await settle(fresh, 1)
    assert len(fresh.aborts) == 1
    await client.aclose()


async def test_redirect_is_not_followed(shim, fresh):
    fresh.behaviour = "redirect"
    with pytest.raises(APIError) as info:
        await shim.complete(chat())
    assert info.value.status_code == 502
    assert len(fresh.generate_requests) == 1
    await settle(fresh, 1)
    assert len(fresh.aborts) == 1


async def test_wrong_content_type_is_502_even_when_streaming(shim, fresh):
    fresh.behaviour = "json_content_type"
    for request in (chat(), chat(stream=True)):
        with pytest.raises(APIError) as info:
            await (shim.complete(request) if not request.stream else collect(shim, request))
        assert info.value.status_code == 502
    await settle(fresh, 2)
    assert len(fresh.aborts) == 2


BAD_STREAMS = {
    "malformed_sse": "CUDA inference stream was invalid",
    "invalid_utf8": "CUDA inference stream was invalid",
    "unterminated": "CUDA inference stream was invalid",
    "missing_done": "CUDA inference stream ended prematurely",
    "no_done_event": FAILED,
    "events_after_done": FAILED,
    "data_after_done_marker": FAILED,
    "wrong_request_id": FAILED,
    "sequence_index": FAILED,
    "no_created_at": FAILED,
    "error_event": FAILED,
    "abort_finish": FAILED,
    "tool_calls_finish": FAILED,
    "unknown_kind": FAILED,
}


@pytest.mark.parametrize("behaviour", list(BAD_STREAMS))
async def test_bad_worker_streams_non_streaming_are_502(shim, fresh, behaviour):
    fresh.behaviour = behaviour
    with pytest.raises(APIError) as info:
        await shim.complete(chat())
    assert (info.value.status_code, info.value.message) == (502, FAILED)
    await settle(fresh, 1)
    assert len(fresh.aborts) == 1


@pytest.mark.parametrize("behaviour", list(BAD_STREAMS))
async def test_bad_worker_streams_mid_stream(shim, fresh, behaviour):
    fresh.behaviour = behaviour
    chunks = []
    with pytest.raises(APIError) as info:
        async for chunk in shim.stream(chat(stream=True)):
            chunks.append(chunk)
    assert info.value.message == BAD_STREAMS[behaviour] and info.value.type == "upstream_error"
    assert chunks[0].choices[0].delta.role == "assistant"  # the 200 had already started
    assert all(c.choices[0].finish_reason is None for c in chunks)
    await settle(fresh, 1)
    assert len(fresh.aborts) == 1


# ---- abort -----------------------------------------------------------------------------------


async def test_client_leaving_a_stream_aborts_once(shim, fresh):
    fresh.behaviour, fresh.slow_s = "endless", 5
    stream = shim.stream(chat(stream=True))
    assert (await anext(stream)).choices[0].delta.role == "assistant"
    assert (await anext(stream)).choices[0].delta.content == "tick "
    await stream.aclose()  # what a disconnect does to the generator
    await settle(fresh, 1)
    [abort] = fresh.aborts
    assert abort == {
        "protocol_version": "ominix.worker.v0",
        "message_type": "AbortRequest",
        "request_id": fresh.generate_requests[0]["request_id"],
        "reason": "client_disconnect_or_upstream_failure",
    }


async def test_cancelled_non_streaming_request_aborts(shim, fresh):
    fresh.behaviour, fresh.slow_s = "slow", 3
    task = asyncio.create_task(shim.complete(chat()))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await settle(fresh, 1)
    assert len(fresh.aborts) == 1


async def test_abort_failure_is_swallowed(fresh):
    client = ShimClient(make_route(fresh, base_url=f"http://127.0.0.1:{free_port()}"))
    await client.abort("ominix-x")  # nothing listening: logged, not raised
    await client.aclose()
