"""The structured-output scenario's requests and table (bench/structured.py), without running it."""

import jsonschema
import pytest

from bench.structured import render, request_body, schema

RECORD = {"name": "a", "age": 1, "tags": ["red"], "active": True}


def test_both_sides_ask_for_the_same_work():
    plain, constrained = request_body("plain", 1, 0, 32), request_body("schema", 1, 0, 32)
    assert plain["messages"] == constrained["messages"] and plain["max_tokens"] == constrained["max_tokens"] == 32
    assert plain["ignore_eos"] and "response_format" not in plain
    # A constrained answer cannot be complete before `tokens` records: it runs to max_tokens too.
    answer_schema = constrained["response_format"]["json_schema"]["schema"]
    jsonschema.validate({"people": [RECORD] * 32}, answer_schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"people": [RECORD] * 31}, answer_schema)
    assert request_body("plain", 1, 0, 8)["messages"] != request_body("plain", 2, 0, 8)["messages"]  # no cache hits


def test_the_table_names_the_peer_that_has_no_constraint():
    level = {
        "plain": {"tokens_per_s": 10.0, "prepare_ms_per_request": 0.1},
        "schema": {
            "tokens_per_s": 9.5,
            "prepare_ms_per_request": 2.1,
            "mask_us_per_token": 40,
            "mask_cpu_us_per_token": 30,
        },
        "schema_vs_plain": 0.95,
    }
    result = {"tokens_per_request": 32, "repeats": 1, "models": {"m": {"levels": {"16": level}}}}
    text = render(result)
    assert "| m | 16 | 10 | 9.5 | 0.95 | 40 | 30 | 2 |" in text
    assert "no constrained decoding" in text and schema(1)["required"] == ["people"]
