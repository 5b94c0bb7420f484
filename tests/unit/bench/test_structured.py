"""The structured-output scenario's requests, answer checks and table (bench/structured.py),
without running it."""

import json

import jsonschema
import pytest

from bench.structured import (
    ANSWER_TOKENS,
    answer_body,
    answer_schema,
    judge,
    render,
    request_body,
    schema,
    streamed,
    tally,
)
from deployments.llm.constraints import JSON_STYLE

RECORD = {"name": "a", "age": 1, "tags": ["red"], "active": True}


def test_both_sides_ask_for_the_same_work():
    plain, constrained = request_body("plain", 1, 0, 32), request_body("schema", 1, 0, 32)
    assert plain["messages"] == constrained["messages"] and plain["max_tokens"] == constrained["max_tokens"] == 32
    assert plain["ignore_eos"] and "response_format" not in plain
    # Thinking off on both sides: a thinking block is free text, the schema would not constrain it.
    assert plain["chat_template_kwargs"] == constrained["chat_template_kwargs"] == {"enable_thinking": False}
    # A constrained answer cannot be complete before `tokens` records: it runs to max_tokens too.
    answer_schema_ = constrained["response_format"]["json_schema"]["schema"]
    jsonschema.validate({"people": [RECORD] * 32}, answer_schema_)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"people": [RECORD] * 31}, answer_schema_)
    assert request_body("plain", 1, 0, 8)["messages"] != request_body("plain", 2, 0, 8)["messages"]  # no cache hits
    # Over HTTP (mlx_lm.server) the same request, streamed with its usage.
    sent = streamed(constrained)
    assert sent["stream"] and sent["stream_options"] == {"include_usage": True}
    assert {k: v for k, v in sent.items() if not k.startswith("stream")} == constrained


def test_every_answer_the_validity_schema_allows_fits_in_its_max_tokens():
    """The longest answer, written as the grammar writes JSON (no free whitespace), is at most
    ANSWER_TOKENS characters, and every token is one character at least: a constrained answer is
    always complete, so the engine's count of valid answers measures the constraint, not the
    length limit."""
    longest = {"name": "A" * 10, "age": 120, "tags": ["green"] * 3, "active": False}
    separators = (JSON_STYLE["item_separator"], JSON_STYLE["key_separator"])
    text = json.dumps({"people": [longest, longest]}, separators=separators)
    assert judge(text, answer_schema()) == "valid" and len(text) <= ANSWER_TOKENS
    for too_much in ({"people": [longest] * 3}, {"people": [{**longest, "name": "A" * 11}]}, {"people": []}):
        assert judge(json.dumps(too_much), answer_schema()) == "invalid"
    body = answer_body(0)
    assert body["max_tokens"] == ANSWER_TOKENS and body["temperature"] == 0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["response_format"]["json_schema"]["schema"] == answer_schema()
    assert answer_body(0)["messages"] != answer_body(1)["messages"]


def test_an_answer_is_valid_only_when_the_whole_of_it_is_json_the_schema_allows():
    good = json.dumps({"people": [RECORD]})
    assert judge(good, answer_schema()) == "valid"
    assert judge(f"```json\n{good}\n```", answer_schema()) == "not JSON"  # what .parse() would reject
    assert judge(good + " That is all.", answer_schema()) == "not JSON"
    assert judge('{"people": [{"name": "a"}]}', answer_schema()) == "invalid"
    assert judge('{"people": [', answer_schema()) == "not JSON"  # cut at max_tokens
    assert tally([good, good, "[1]", "prose"], answer_schema()) == {"answers": 4, "json": 3, "valid": 2}


def _level(peer: bool) -> dict:
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
    if peer:
        level["peer"] = {
            "plain": {"tokens_per_s": 7.0, "tokens_per_request": 32.0},
            "schema": {"tokens_per_s": 7.1, "tokens_per_request": 30.4},
        }
    return level


def rendered(model: dict) -> str:
    """The tables of a run of one model, `m`, at 32 tokens a request."""
    return render({"tokens_per_request": 32, "repeats": 1, "models": {"m": model}})


def test_the_table_sets_the_peer_beside_the_engine_and_says_it_does_not_constrain():
    validity = {
        "max_tokens": ANSWER_TOKENS,
        "engine": {"answers": 16, "json": 16, "valid": 16},
        "peer": {"answers": 16, "json": 3, "valid": 0},
    }
    text = rendered({"levels": {"16": _level(peer=True)}, "validity": validity})
    assert "| m | 16 | 10 | 9.5 | 0.95 | 7 | 7.1 | 32 / 30 | 40 | 30 | 2 |" in text
    assert "| m | 16/16 | 3/16 | 0/16 |" in text
    assert "no constrained decoding" in text and "over HTTP" in text and "in process" in text
    assert f"({ANSWER_TOKENS})" in text and schema(1)["required"] == ["people"]


def test_a_run_without_the_peer_renders_its_columns_empty():
    text = rendered({"levels": {"1": _level(peer=False)}})
    assert "| m | 1 | 10 | 9.5 | 0.95 | - | - | - | 40 | 30 | 2 |" in text
    assert "valid answers" not in text


def test_the_check_and_retry_case_differs_only_by_unique_tags():
    exact, checked = answer_schema(), answer_schema(unique_tags=True)
    tags = checked["properties"]["people"]["items"]["properties"]["tags"]
    assert tags.pop("uniqueItems") is True and checked == exact  # nothing else changes
    duplicated = json.dumps({"people": [{**RECORD, "tags": ["red", "red"]}]})
    assert judge(duplicated, answer_schema()) == "valid"
    assert judge(duplicated, answer_schema(unique_tags=True)) == "invalid"
    assert answer_body(3, unique_tags=True)["messages"] == answer_body(3)["messages"]


def test_the_check_and_retry_table_sets_the_checked_schema_beside_the_exact_one():
    checks = {
        "grammar": {"answers": 16, "valid": 16, "not_met": 0, "attempts_per_answer": 1.0, "tokens_per_answer": 50.0,
                    "seconds_per_answer": 1.0, "wall_s": 4.0},
        "check": {"answers": 16, "valid": 15, "not_met": 1, "attempts_per_answer": 1.5, "tokens_per_answer": 75.0,
                  "seconds_per_answer": 1.5, "wall_s": 6.0},
    }  # fmt: skip
    text = rendered({"levels": {"1": _level(peer=False)}, "checks": checks})
    assert "| m | with `uniqueItems` (checked) | 15/16 | 1 | 1.5 | 75 | 6 | 1.5 | 1.5 |" in text
    assert "| m | without (the grammar is the schema) | 16/16 | 0 | 1 | 50 | 4 | 1 | 1 |" in text
    assert "Check-and-retry" in text
