"""A corpus of bad requests to the text routes (chat, completions, unknown routes and methods):
each must get a 4xx with an OpenAI error body, never a 5xx.

Most are refused by the ingress itself (tests/ingress/test_bad_input.py proves it, in process,
and that none of them reaches a slot); the ones only a slot can judge (the tokenizer, the
model's vocabulary) are `SLOT_CHECKED` and go through the live graph (tests/e2e/test_bad_input.py).
"""

from __future__ import annotations

import json

import pytest

MODEL = "ominix-tiny-qwen3"
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
GOOD_CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
GOOD_COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 2}

# What the schema itself can say is wrong (a JSON type it does not allow, a value outside its
# bounds or enum, a required field missing) Schemathesis's coverage phase sends field by field
# (tests/ingress/test_schema_fuzz.py), with the same checks: a 4xx, the OpenAI error body, no
# slot reached. Those cases left this corpus; what stays is what the schema cannot express or
# the coverage phase does not send: values the schema allows that the ingress or a slot refuses
# (unknown models, paths, too many stop sequences, token ids outside the vocabulary), NaN and
# Infinity (not JSON), bounds it leaves out, broken bodies, content types, routes and methods.
BAD_VALUES = {
    "model": ["gpt-4o", "../../etc/passwd", "/etc/passwd", "x" * 100_000],
    "max_tokens": [1.5, 10**12],
    "temperature": [-1, float("nan"), float("inf")],
    "top_p": [0, float("nan")],
    "min_p": [2, -1],
    "frequency_penalty": [5, -3],
    "presence_penalty": [5, -3],
    "repetition_penalty": [0, -1],
    "stop": [[""], ["a"] * 17],
    "n": [9],  # over llm.max_n (8)
    "logit_bias": [{"a": 1}, {"99999999": 1}],
}
CHAT_ONLY = {
    "messages": [
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}],
    ],
}
COMPLETION_ONLY = {
    "prompt": [[], ["a", "b"], [-1], [10**9], "", "word " * 6000],
    "suffix": ["tail"],
}
RAW_BODIES = [
    b"",
    b"{",
    b"[]",
    b"null",
    b"123",
    b'"text"',
    b"{'a': 1}",
    b'{"messages": }',
    b"\xff\xfe\x00",
    b"{" * 2000,
    b'{"model": "' + MODEL.encode() + b'"',
    b"\x00" * 64,
]


def corpus():
    cases = []
    for route, good, only in ((CHAT, GOOD_CHAT, CHAT_ONLY), (COMPLETIONS, GOOD_COMPLETION, COMPLETION_ONLY)):
        for field, values in {**BAD_VALUES, **only}.items():
            for i, value in enumerate(values):
                cases.append(pytest.param(route, {"json_body": {**good, field: value}}, id=f"{route}-{field}-{i}"))
        for i, raw in enumerate(RAW_BODIES):
            cases.append(pytest.param(route, {"content": raw}, id=f"{route}-raw-{i}"))
        for ctype in (
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/xml",
        ):
            cases.append(
                pytest.param(
                    route, {"content": json.dumps(good).encode(), "ctype": ctype}, id=f"{route}-ctype-{ctype[:12]}"
                )
            )
    for path in (
        "/v1/nothing",
        "/v1/chat",
        "/v2/chat/completions",
        "/../../etc/passwd",
        "/v1/models/../../x",
        "/%00",
        "/v1/audio/unknown",
    ):
        cases.append(pytest.param(path, {"method": "GET"}, id=f"route-{path}"))
    for path in (CHAT, COMPLETIONS):
        for method in ("GET", "PUT", "DELETE", "PATCH"):
            cases.append(pytest.param(path, {"method": method}, id=f"method-{method}-{path}"))
    return cases


CASES = corpus()

# Only the slot can refuse these: token counts (max_tokens beyond the context, a prompt too
# long once tokenized), token ids and logit_bias entries outside the model's vocabulary.
SLOT_CHECKED = frozenset(
    {
        "/v1/chat/completions-max_tokens-1",
        "/v1/chat/completions-logit_bias-1",
        "/v1/completions-max_tokens-1",
        "/v1/completions-logit_bias-1",
        "/v1/completions-prompt-2",
        "/v1/completions-prompt-3",
        "/v1/completions-prompt-4",
        "/v1/completions-prompt-5",
    }
)


def request_of(spec: dict) -> dict:
    """httpx request arguments for a case (NaN/Infinity written as Python writes them)."""
    method = spec.get("method", "POST")
    if "json_body" in spec:
        content, ctype = json.dumps(spec["json_body"]).encode(), "application/json"
    else:
        content, ctype = spec.get("content", b""), spec.get("ctype", "application/json")
    return {"method": method, "content": content if method == "POST" else None, "headers": {"content-type": ctype}}


def assert_openai_4xx(r) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
