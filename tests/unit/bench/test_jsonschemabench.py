"""The JSONSchemaBench scenario's sample, keyword census, judging and tables
(bench/jsonschemabench.py), without the benchmark's data or a graph: a small tree of categories
written here stands in for a clone."""

from __future__ import annotations

import json

import pytest

from bench.jsonschemabench import (
    MIN_PER_CATEGORY,
    allocate,
    by_keyword,
    keywords,
    llguidance_alone,
    outcome,
    render,
    request_body,
    sample,
    summary,
)

UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


@pytest.fixture
def clone(tmp_path):
    """data/<category>/*.json: 40, 25 and 3 schemas."""
    for category, count in (("Big", 40), ("Mid", 25), ("Tiny", 3)):
        folder = tmp_path / "data" / category
        folder.mkdir(parents=True)
        for i in range(count):
            (folder / f"s{i:03d}.json").write_text(json.dumps({"type": "integer", "minimum": i}))
    return tmp_path


def test_each_category_gets_its_share_and_a_floor():
    assert allocate({"a": 900, "b": 90, "c": 10}, 100) == {"a": 90, "b": MIN_PER_CATEGORY, "c": MIN_PER_CATEGORY}
    assert allocate({"a": 50, "b": 3}, 20) == {"a": 19, "b": 3}  # all of a small category


def test_the_sample_is_the_same_every_run_and_spans_every_category(clone):
    first = sample(clone, 30)
    assert first == sample(clone, 30) and first != sample(clone, 30, seed=1)
    assert {c for c, _ in first} == {"Big", "Mid", "Tiny"}
    assert sum(c == "Tiny" for c, _ in first) == 3
    assert sample(clone / "data", 30) == first  # the clone or its data folder


def test_keywords_are_found_in_schema_positions_only():
    schema = {
        "properties": {"not": {"type": "string", "format": "regex"}, "b": {"oneOf": [{}, {"uniqueItems": True}]}},
        "required": ["not", "c"],
        "enum": [{"if": 1}],
        "$defs": {"x": {"dependentRequired": {"a": ["b"]}}},
        "self": {"vendor": "com.example", "format": "jsonschema"},  # Snowplow's: data, not a schema
    }
    assert keywords(schema) == {
        "format",
        "format:regex",
        "oneOf",
        "uniqueItems",
        "enum",
        "dependentRequired",
        "required-not-in-properties",
    }  # a property named "not", an enum value holding "if", Snowplow's self object are no keywords


def test_llguidance_alone_declines_what_it_does_not_implement():
    assert llguidance_alone({"type": "integer"}) is None
    assert "uniqueItems" in llguidance_alone(UNIQUE)


def test_the_request_carries_the_schema_in_the_prompt_and_as_strict_json_schema():
    body = request_body(UNIQUE)
    assert '"uniqueItems":true' in body["messages"][0]["content"]
    assert body["response_format"]["json_schema"] == {"name": "answer", "schema": UNIQUE, "strict": True}
    assert body["temperature"] == 0


def chat(content, finish="stop") -> dict:
    return {"choices": [{"message": {"content": content}, "finish_reason": finish}]}


def test_every_answer_is_judged_apart_from_the_servers_check():
    assert outcome(200, chat("[1, 2]"), UNIQUE) == ("valid", None)
    assert outcome(200, chat("[1, 1]"), UNIQUE)[0] == "invalid"
    assert outcome(200, chat('{"a": 1, "a": 2}'), {"type": "object"})[0] == "invalid"  # a key twice
    assert outcome(200, chat('"(x"'), {"type": "string", "format": "regex"})[0] == "invalid"
    assert outcome(200, chat("[1, ", "length"), UNIQUE) == ("cut", None)
    assert outcome(200, chat(None, "schema_not_met"), UNIQUE) == ("not_met", None)
    assert outcome(200, chat("[1, 1]", "schema_not_met"), UNIQUE)[0] == "invalid"  # never sent with its text
    assert outcome(400, {"error": {"message": "cannot be enforced"}}, UNIQUE) == ("refused", "cannot be enforced")
    assert outcome(500, {"error": {}}, UNIQUE)[0] == "error"
    assert outcome(599, None, UNIQUE)[0] == "error"


def rows() -> list[dict]:
    def row(category, out, keywords_, alone=None):
        return {"category": category, "file": "f", "keywords": keywords_, "llguidance_alone": alone, "outcome": out}

    return [
        row("A", "valid", ["uniqueItems"], "Unimplemented keys"),
        row("A", "cut", ["format", "format:regex"], "Unknown format"),
        row("A", "not_met", ["oneOf"]),
        row("B", "refused", ["$ref"], "Resource not present"),
        row("B", "valid", []),
    ]


def test_coverage_is_valid_or_cut_over_every_schema():
    s = summary(rows())
    assert (s["valid"], s["cut"], s["not_met"], s["refused"], s["schemas"]) == (2, 1, 1, 1, 5)
    assert s["coverage"] == pytest.approx(3 / 5) and s["llguidance_alone_compiles"] == pytest.approx(2 / 5)
    keyed = by_keyword(rows())
    assert keyed["uniqueItems"]["valid"] == 1 and keyed["format:*"]["cut"] == 1
    assert "format:regex" not in keyed  # fewer than three schemas: grouped under format:*


def test_the_tables_name_every_category_and_keyword():
    result = {
        "sample": {"schemas": 5, "seed": 40, "min_per_category": 10},
        "request": {"temperature": 0, "max_tokens": 512, "concurrency": 8},
        "wall_s": 12.0,
        "checks": {"valid": 2, "resampled": 3, "not_met": 1},
        "overall": summary(rows()),
        "by_category": {c: summary([r for r in rows() if r["category"] == c]) for c in ("A", "B")},
        "by_keyword": by_keyword(rows()),
        "rows": [{**r, "detail": "response_format: this JSON Schema cannot be enforced: remote"} for r in rows()],
    }
    text = render(result)
    assert "| all | 5 | 0.40 | 2 | 1 | 1 | 1 | 0 | 0 | 0.600 |" in text
    assert "| A | 3 | 0.33 | 1 | 1 | 1 | 0 | 0 | 0 | 0.667 |" in text
    assert "| `uniqueItems` | 1 | 0.00 | 1 |" in text
    assert "resampled 3" in text and "1 × remote" in text
