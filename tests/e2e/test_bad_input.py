"""A corpus of bad requests: each gets the right 4xx with an OpenAI error body, none a 5xx,
and afterwards the graph answers a normal request with every replica still the same."""

from __future__ import annotations

import json

import pytest

MODEL = "ominix-tiny-qwen3"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
GOOD_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
GOOD_COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2}

BAD_VALUES = {
    "model": [1, [], {}, True, "gpt-4o", "../../etc/passwd", "/etc/passwd", "x" * 100_000],
    "max_tokens": ["x", -5, 0, 1.5, 10**12, [], {}],
    "temperature": ["hot", -1, 2.5, float("nan"), float("inf"), []],
    "top_p": [0, -0.1, 1.5, "x", float("nan")],
    "top_k": [-1, "x", 1.5],
    "min_p": [2, -1, "x"],
    "frequency_penalty": [5, -3, "x"],
    "presence_penalty": [5, -3, "x"],
    "repetition_penalty": [0, -1, "x"],
    "stop": [1, [1, 2], {}, [""], ["a"] * 17],
    "n": [0, 2, -1, "two"],
    "stream": ["maybe", 2, {}, []],
    "seed": ["x", 1.5, []],
    "logit_bias": [[], "x", {"a": 1}, {"99999999": 1}, {"1": "high"}],
    "stream_options": ["x", {"include_usage": "maybe"}, 5],
}
CHAT_ONLY = {
    "messages": [
        [], {}, "hi", [1], [{"role": "x", "content": "a"}], [{"content": "no role"}],
        [{"role": "user", "content": {"a": 1}}], [{"role": "user", "content": [{"type": "video"}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}], None,
    ],
    "tools": ["x", [{"type": "function"}], [{"function": {}}], [1]],
    "max_completion_tokens": [0, "x", -1],
    "chat_template_kwargs": ["x", [1]],
}
COMPLETION_ONLY = {
    "prompt": [[], {}, 5, [[]], ["a", "b"], None, [-1], [10**9], "", "word " * 6000],
    "suffix": ["tail"],
    "echo": ["loud", {}],
}
RAW_BODIES = [
    b"", b"{", b"[]", b"null", b"123", b'"text"', b"{'a': 1}", b'{"messages": }', b"\xff\xfe\x00",
    b"{" * 2000, b'{"model": "' + MODEL.encode() + b'"', b"\x00" * 64,
]


def corpus():
    cases = []
    for route, good, only in ((CHAT, GOOD_CHAT, CHAT_ONLY), (COMPLETIONS, GOOD_COMPLETION, COMPLETION_ONLY)):
        for field, values in {**BAD_VALUES, **only}.items():
            for i, value in enumerate(values):
                cases.append(pytest.param(route, {"json_body": {**good, field: value}}, id=f"{route}-{field}-{i}"))
        for field in good:
            if field != "max_tokens":
                body = {k: v for k, v in good.items() if k != field}
                if field == "model":
                    continue  # the model is optional: the slot's default is used
                cases.append(pytest.param(route, {"json_body": body}, id=f"{route}-missing-{field}"))
        for i, raw in enumerate(RAW_BODIES):
            cases.append(pytest.param(route, {"content": raw}, id=f"{route}-raw-{i}"))
        for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/xml"):
            cases.append(pytest.param(route, {"content": json.dumps(good).encode(), "ctype": ctype}, id=f"{route}-ctype-{ctype[:12]}"))
    for path in ("/v1/nothing", "/v1/chat", "/v2/chat/completions", "/../../etc/passwd", "/v1/models/../../x", "/%00", "/v1/audio/unknown"):
        cases.append(pytest.param(path, {"method": "GET"}, id=f"route-{path}"))
    for path in (CHAT, COMPLETIONS):
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            cases.append(pytest.param(path, {"method": method}, id=f"method-{method}-{path}"))
    return cases


CASES = corpus()


def test_corpus_is_big_enough():
    assert len(CASES) >= 200


@pytest.mark.parametrize("path, spec", CASES)
def test_bad_request_gets_an_openai_4xx(http, path, spec):
    method = spec.get("method", "POST")
    if "json_body" in spec:
        content = json.dumps(spec["json_body"]).encode()  # NaN/Infinity as Python writes them
        headers = {"content-type": "application/json"}
    else:
        content = spec.get("content", b"")
        headers = {"content-type": spec.get("ctype", "application/json")}
    r = http.request(method, path, content=content if method == "POST" else None, headers=headers)
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


def test_graph_is_intact_after_the_corpus(client):
    from ray import serve

    r = client.chat.completions.create(**GOOD_CHAT)
    assert r.choices[0].finish_reason == "length"
    app = serve.status().applications["ominix"]
    assert app.status == "RUNNING"
    for name, deployment in app.deployments.items():
        assert deployment.status == "HEALTHY", name
        assert set(deployment.replica_states) == {"RUNNING"}, (name, deployment.replica_states)
