"""Every error is an OpenAI-shaped JSON body with the right status, and the graph keeps serving."""

from __future__ import annotations

import openai
import pytest

from tests.assertions import assert_openai_error

MODEL = "ominix-tiny-qwen3"
HELLO = [{"role": "user", "content": "hi"}]


def test_unknown_model_is_404_model_not_found(client, http):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert info.value.code == "model_not_found"
    r = http.post("/v1/completions", json={"model": "other/model", "prompt": "x"})
    assert_openai_error(r, 404, "model", "model_not_found")


def test_n_over_the_limit_is_400(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=HELLO, n=9)  # llm.max_n is 8
    assert info.value.body["param"] == "n" and "8" in info.value.message


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": HELLO, "temperature": 5}, "temperature"),
        ({"model": MODEL, "messages": HELLO, "max_tokens": -1}, "max_tokens"),
        ({"model": MODEL, "messages": [{"role": "user", "content": 3}]}, None),
        ({"model": MODEL, "messages": HELLO, "logit_bias": {"999999": 5}}, "logit_bias"),
    ],
)
def test_invalid_requests_are_400_not_422(http, body, param):
    r = http.post("/v1/chat/completions", json=body)
    assert_openai_error(r, 400, param)


def test_malformed_json_is_400(http):
    r = http.post("/v1/chat/completions", content=b'{"model": ', headers={"content-type": "application/json"})
    assert "JSON" in assert_openai_error(r, 400)["message"]


def test_prompt_longer_than_context_is_400(http):
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": "word " * 5000, "max_tokens": 1})
    assert_openai_error(r, 400, code="context_length_exceeded")


def test_unknown_route_404_and_wrong_method_405(http):
    assert_openai_error(http.get("/v1/nothing-here"), 404)
    assert_openai_error(http.get("/v1/chat/completions"), 405)


def test_streaming_errors_keep_their_status(http):
    r = http.post("/v1/chat/completions", json={"model": "nope", "messages": HELLO, "stream": True})
    assert_openai_error(r, 404, code="model_not_found")


def test_graph_keeps_serving_after_errors(client, http):
    for _ in range(3):
        http.post("/v1/chat/completions", content=b"garbage", headers={"content-type": "application/json"})
        http.post("/v1/completions", json={"model": MODEL, "prompt": "x" * 30000, "max_tokens": 1})
    r = client.chat.completions.create(model=MODEL, messages=HELLO, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"


def test_health(http):
    r = http.get("/health")
    assert r.status_code == 200
    assert r.json()["status"] == "healthy" and r.json()["service"] == "ominix-serve"
