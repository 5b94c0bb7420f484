"""Worker-v0 protocol rules: request support (6.4), envelopes (6.5), the worker event grammar,
readiness identity checks (6.3) and the error mapping (6.6)."""

import json

import pytest

from deployments.cuda_proxy.config import CudaRoute
from deployments.cuda_proxy.protocol import (
    CudaChatRequest,
    InvalidStream,
    NotReady,
    PrematureEnd,
    ProtocolError,
    RemoteError,
    TransportError,
    Unsupported,
    UpstreamStatus,
    UpstreamTimeout,
    WorkerStream,
    abort_envelope,
    check_supported,
    error_detail,
    generate_envelope,
    http_error,
    model_problem,
    new_request_id,
    production_shim_problem,
    stream_error,
)

ROUTE = CudaRoute(
    base_url="http://127.0.0.1:1",
    token="t",
    models=("public-id",),
    served_model="served/id",
    chat_template_kwargs={"enable_thinking": False},
)
HELLO = [{"role": "user", "content": "ping"}]


def request(**fields):
    return CudaChatRequest.model_validate({"model": "public-id", "messages": HELLO, **fields})


# ---- 6.4 request validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": 0},
        {"tools": [{"type": "function", "function": {"name": "f"}}]},
        {"tool_choice": "auto"},
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
        {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c1"}]},
        {"messages": [{"role": "user", "content": "x", "tool_call_id": "c1"}]},
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                }
            ]
        },
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "only text"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}]},
    ],
)
def test_unsupported_requests(fields):
    with pytest.raises(Unsupported):
        check_supported(request(**fields))


@pytest.mark.parametrize("fields", [{"n": 2}, {"logprobs": True}, {"logprobs": True, "top_logprobs": 1}])
def test_several_choices_and_logprobs_are_unsupported(fields):
    with pytest.raises(Unsupported):
        check_supported(request(**fields))
    check_supported(request(n=1, logprobs=False))  # what the worker does anyway


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"tool_choice": "none"},
        {"response_format": {"type": "text"}},
        {"tools": []},
        {"max_tokens": 1, "stream": True},
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"},
                *HELLO,
            ]
        },
        {"messages": [{"role": "assistant", "content": "a", "tool_calls": []}, *HELLO]},
    ],
)
def test_supported_requests(fields):
    check_supported(request(**fields))


def test_unsupported_maps_to_the_public_400():
    error = http_error(Unsupported("tools"))
    assert (error.status_code, error.type) == (400, "upstream_error")
    assert error.message == "The selected CUDA model does not support this request"


def test_a_json_response_format_is_refused_by_name():
    """worker-v0 has no constrained decoding: the 400 names the field, never an unconstrained answer."""
    with pytest.raises(Unsupported) as info:
        check_supported(request(response_format={"type": "json_object"}))
    error = http_error(info.value)
    assert (error.status_code, error.param) == (400, "response_format")


@pytest.mark.parametrize(
    "name, value",
    [
        ("stop", ["\n"]),
        ("stop", "END"),
        ("seed", 7),
        ("top_k", 20),
        ("min_p", 0.1),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -0.5),
        ("repetition_penalty", 1.2),
        ("logit_bias", {"42": -100}),
        ("ignore_eos", True),
        ("min_tokens", 3),
        ("reasoning_effort", "low"),
        ("modalities", ["text", "audio"]),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("prediction", {"type": "content", "content": "x"}),
        ("n", 2),
        ("logprobs", True),
        ("top_logprobs", 2),
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", "auto"),
    ],
)
def test_a_field_the_worker_cannot_honour_is_a_400_naming_it(name, value):
    """worker-v0 samples with max_new_tokens, temperature and top_p only: every other field that
    would change the answer is refused by name (OminiX-API drops them and answers without)."""
    with pytest.raises(Unsupported) as info:
        check_supported(request(**{name: value}))
    error = http_error(info.value)
    assert (error.status_code, error.param, error.type) == (400, name, "upstream_error")


@pytest.mark.parametrize(
    "fields",
    [
        {"stop": None},
        {"stop": []},
        {"seed": None, "top_k": 0, "min_p": 0, "presence_penalty": 0, "frequency_penalty": 0.0},
        {"repetition_penalty": 1.0, "logit_bias": {}, "ignore_eos": False, "min_tokens": 0},
        {"modalities": ["text"], "user": "u", "metadata": {"a": "b"}, "store": False, "prompt_cache_key": "k"},
    ],
)
def test_fields_that_change_nothing_pass(fields):
    """What clients send by default (a zero penalty, text modality, routing and bookkeeping
    fields) changes no answer and goes through."""
    check_supported(request(**fields))


def test_max_completion_tokens_and_request_template_kwargs_reach_the_worker():
    """OpenAI's newer `max_completion_tokens` is the worker's max_new_tokens (and 0 is refused as
    max_tokens 0 is); the request's chat_template_kwargs go over the route's own."""
    fields = {"max_completion_tokens": 9, "chat_template_kwargs": {"enable_thinking": True, "x": 1}}
    envelope = generate_envelope(request(**fields), "ominix-1", ROUTE, False)
    assert envelope["sampling"] == {"max_new_tokens": 9}
    assert envelope["input"]["chat_template_kwargs"] == {"enable_thinking": True, "x": 1}
    with pytest.raises(Unsupported):
        check_supported(request(max_completion_tokens=0))


# ---- 6.5 envelopes ---------------------------------------------------------------------------


def test_generate_envelope_carries_the_served_id_and_defaults():
    rid = new_request_id()
    assert rid.startswith("ominix-") and len(rid) == len("ominix-") + 32
    envelope = generate_envelope(request(), rid, ROUTE, stream=False)
    assert envelope == {
        "protocol_version": "ominix.worker.v0",
        "message_type": "GenerateRequest",
        "request_id": rid,
        "model": "served/id",
        "input": {"kind": "chat", "messages": HELLO, "chat_template_kwargs": {"enable_thinking": False}},
        "sampling": {"max_new_tokens": 2048},
        "response_options": {"skip_special_tokens": True, "spaces_between_special_tokens": True},
        "stream": False,
    }


def test_generate_envelope_sampling_and_messages_as_received():
    messages = [{"role": "user", "content": "x", "name": "bob"}, {"role": "assistant", "content": None}]
    envelope = generate_envelope(
        request(messages=messages, max_tokens=7, temperature=0.2, top_p=0.9, stream=True), "ominix-1", ROUTE, True
    )
    assert envelope["sampling"] == {"max_new_tokens": 7, "temperature": 0.2, "top_p": 0.9}
    assert envelope["input"]["messages"] == messages and envelope["stream"] is True


def test_abort_envelope():
    assert abort_envelope("ominix-1") == {
        "protocol_version": "ominix.worker.v0",
        "message_type": "AbortRequest",
        "request_id": "ominix-1",
        "reason": "client_disconnect_or_upstream_failure",
    }


def test_error_detail_prefers_error_message_and_truncates():
    assert error_detail(b'{"error":{"message":"bad"}}') == "bad"
    assert error_detail(b"x" * 600) == "x" * 512
    assert error_detail(b"\xff oops") == "\ufffd oops"


# ---- 6.3 readiness identity ------------------------------------------------------------------

SHIM = {
    "scheduler_backend": "sglang-ominix-v0-http-shim",
    "protocol_version": "ominix.worker.v0",
    "mode": "grpc",
    "public_openai_api": False,
    "auth_required": True,
    "routes": {"generate": "/generate"},
}


def test_production_shim():
    assert production_shim_problem(SHIM) is None


@pytest.mark.parametrize(
    "change",
    [
        {"mode": "fake"},
        {"scheduler_backend": "sglang"},
        {"protocol_version": "ominix.worker.v1"},
        {"public_openai_api": True},
        {"public_openai_api": 0},
        {"auth_required": False},
        {"auth_required": 1},
        {"routes": {"generate": "/v1/generate"}},
        {"routes": None},
    ],
)
def test_not_a_production_shim(change):
    assert production_shim_problem({**SHIM, **change}) is not None
    assert production_shim_problem([SHIM]) is not None


def test_model_identity():
    assert model_problem({"served_model_name": "served/id", "is_generation": True}, "served/id") is None
    assert "other" in model_problem({"served_model_name": "other", "is_generation": True}, "served/id")
    assert model_problem({"served_model_name": "served/id", "is_generation": False}, "served/id")
    assert model_problem({"served_model_name": "served/id"}, "served/id")
    assert model_problem("served/id", "served/id")


# ---- worker event grammar --------------------------------------------------------------------


def ev(kind, rid="ominix-r", **fields):
    return json.dumps(
        {
            "protocol_version": "ominix.worker.v0",
            "message_type": "WorkerEvent",
            "request_id": rid,
            "kind": kind,
            "created_at_ms": 1,
            **fields,
        }
    )


USAGE = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}


def run(*payloads):
    stream = WorkerStream("ominix-r")
    deltas = [stream.accept(p) for p in payloads]
    stream.end()
    return stream, deltas


def test_clean_sequence():
    stream, deltas = run(
        ev("prefill_done", usage={"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}),
        ev("token", text_delta="po", sequence_index=0),
        ev("token", text_delta="ng"),
        ev("usage", usage=USAGE),
        ev("done", text_delta="!", finish_reason="stop"),
        "[DONE]",
    )
    assert stream.text == "pong!" and deltas == ["", "po", "ng", "", "!", ""]
    assert stream.finish_reason == "stop" and stream.usage.total_tokens == 7


@pytest.mark.parametrize("reason", ["stop", "length", "content_filter"])
def test_accepted_finish_reasons(reason):
    stream, _ = run(ev("done", finish_reason=reason), "[DONE]")
    assert stream.finish_reason == reason and stream.usage.total_tokens == 0


@pytest.mark.parametrize(
    "payloads, error",
    [
        ([ev("done", finish_reason="abort")], RemoteError),
        ([ev("done", finish_reason="error")], RemoteError),
        ([ev("error", error={"message": "oom"})], RemoteError),
        ([ev("done", finish_reason="tool_calls")], ProtocolError),
        ([ev("done")], ProtocolError),
        ([ev("done", finish_reason="eos")], ProtocolError),
        ([ev("telemetry")], ProtocolError),
        (
            [
                json.dumps(
                    {
                        "protocol_version": "ominix.worker.v0",
                        "message_type": "WorkerEvent",
                        "request_id": "ominix-r",
                        "created_at_ms": 1,
                    }
                )
            ],
            ProtocolError,
        ),
        ([ev("token", rid="ominix-other", text_delta="x")], ProtocolError),
        ([ev("token", text_delta="x", sequence_index=1)], ProtocolError),
        ([ev("token", text_delta="x", created_at_ms=None)], ProtocolError),
        ([ev("token", text_delta="x", created_at_ms=-1)], ProtocolError),
        ([ev("token", text_delta="x", created_at_ms=1.5)], ProtocolError),
        ([ev("token", text_delta=3)], ProtocolError),
        ([ev("usage", usage={"prompt_tokens": "5"})], ProtocolError),
        ([ev("token", message_type="GenerateRequest")], ProtocolError),
        (["[DONE]"], ProtocolError),
        ([ev("done", finish_reason="stop"), ev("token", text_delta="x")], ProtocolError),
        ([ev("done", finish_reason="stop"), "[DONE]", ev("token", text_delta="x")], ProtocolError),
        ([ev("done", finish_reason="stop"), "[DONE]", "[DONE]"], ProtocolError),
        (["{not json"], InvalidStream),
        (["[1, 2]"], InvalidStream),
    ],
)
def test_rejected_sequences(payloads, error):
    stream = WorkerStream("ominix-r")
    with pytest.raises(error):
        for payload in payloads:
            stream.accept(payload)
        stream.end()


def test_created_at_ms_is_required():
    event = json.loads(ev("token", text_delta="x"))
    del event["created_at_ms"]
    with pytest.raises(ProtocolError, match="created_at_ms"):
        WorkerStream("ominix-r").accept(json.dumps(event))


def test_premature_end():
    stream = WorkerStream("ominix-r")
    stream.accept(ev("token", text_delta="x"))
    with pytest.raises(PrematureEnd):
        stream.end()
    stream.accept(ev("done", finish_reason="stop"))
    with pytest.raises(PrematureEnd):  # done without [DONE] is still premature
        stream.end()


# ---- 6.6 error mapping -----------------------------------------------------------------------

FAILED = "The CUDA inference backend failed"
TIMED_OUT = "The CUDA inference backend timed out"
UNSUPPORTED = "The selected CUDA model does not support this request"


@pytest.mark.parametrize(
    "error, status, message",
    [
        (Unsupported("x"), 400, UNSUPPORTED),
        (UpstreamStatus(400), 400, UNSUPPORTED),
        (UpstreamStatus(422), 400, UNSUPPORTED),
        (UpstreamTimeout("x"), 504, TIMED_OUT),
        (UpstreamStatus(408), 504, TIMED_OUT),
        (UpstreamStatus(504), 504, TIMED_OUT),
        (UpstreamStatus(401), 503, FAILED),
        (UpstreamStatus(403), 503, FAILED),
        (UpstreamStatus(429), 503, FAILED),
        (UpstreamStatus(503), 503, FAILED),
        (NotReady("x"), 503, FAILED),
        (TransportError("refused"), 502, FAILED),
        (UpstreamStatus(500), 502, FAILED),
        (UpstreamStatus(404), 502, FAILED),
        (UpstreamStatus(307), 502, FAILED),
        (ProtocolError("x"), 502, FAILED),
        (InvalidStream("x"), 502, FAILED),
        (PrematureEnd("x"), 502, FAILED),
        (RemoteError("x"), 502, FAILED),
    ],
)
def test_http_error_mapping(error, status, message):
    api_error = http_error(error)
    assert (api_error.status_code, api_error.message, api_error.type) == (status, message, "upstream_error")


@pytest.mark.parametrize(
    "error, message",
    [
        (TransportError("reset"), "CUDA inference stream failed"),
        (UpstreamTimeout("x"), "CUDA inference stream failed"),
        (InvalidStream("x"), "CUDA inference stream was invalid"),
        (PrematureEnd("x"), "CUDA inference stream ended prematurely"),
        (RemoteError("x"), FAILED),
        (ProtocolError("x"), FAILED),
    ],
)
def test_mid_stream_messages(error, message):
    api_error = stream_error(error)
    assert api_error.message == message and api_error.type == "upstream_error"
    assert api_error.body()["error"]["code"] is None


@pytest.mark.parametrize("value", ["5m", 0, -1])
def test_keep_alive_is_refused_by_name(value):
    """The worker keeps its one model resident: a keep_alive cannot apply there, so it is a 400
    naming it, never dropped."""
    with pytest.raises(Unsupported) as info:
        check_supported(request(keep_alive=value))
    assert http_error(info.value).param == "keep_alive"
