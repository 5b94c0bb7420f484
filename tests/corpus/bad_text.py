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
    "n": [0, 9, -1, "two"],  # 9: over llm.max_n (8)
    "stream": ["maybe", 2, {}, []],
    "seed": ["x", 1.5, []],
    "logit_bias": [[], "x", {"a": 1}, {"99999999": 1}, {"1": "high"}],
    "stream_options": ["x", {"include_usage": "maybe"}, 5],
}
CHAT_ONLY = {
    "messages": [
        [],
        {},
        "hi",
        [1],
        [{"role": "x", "content": "a"}],
        [{"content": "no role"}],
        [{"role": "user", "content": {"a": 1}}],
        [{"role": "user", "content": [{"type": "video"}]}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}],
        None,
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
        for field in good:
            if field != "max_tokens":
                body = {k: v for k, v in good.items() if k != field}
                if field == "model":
                    continue  # the model is optional: the slot's default is used
                cases.append(pytest.param(route, {"json_body": body}, id=f"{route}-missing-{field}"))
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
        "/v1/chat/completions-max_tokens-4",
        "/v1/chat/completions-logit_bias-3",
        "/v1/completions-max_tokens-4",
        "/v1/completions-logit_bias-3",
        "/v1/completions-prompt-6",
        "/v1/completions-prompt-7",
        "/v1/completions-prompt-8",
        "/v1/completions-prompt-9",
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
