"""The answer check alone (deployments/llm/answer_check.py): what it validates a finished choice
against (the schemas as sent, in their own draft), which formats it asserts, when a streamed
answer must be held back for it, and what a resampled attempt changes."""

from __future__ import annotations

import json

import llguidance
import pytest

from deployments.llm.answer_check import (
    GRAMMAR_FORMATS,
    RETRY_TEMPERATURE,
    AnswerCheck,
    checks_format,
    needs_check,
    retry_fields,
    violation,
)
from deployments.llm.constraints import JSON_OPTIONS, enforcement
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import SEED_RANGE, ChatCompletionRequest, CompletionRequest, FunctionCall, ToolCall

MSG = [{"role": "user", "content": "hi"}]
UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=MSG, **fields)


def schema_format(schema) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def answer(text: str, finish: str = "stop", calls=()) -> GenerationChunk:
    return GenerationChunk(content=text, finish_reason=finish, tool_calls=list(calls))


def call(name: str, arguments: dict) -> ToolCall:
    return ToolCall(id="call_1", function=FunctionCall(name=name, arguments=json.dumps(arguments)))


def test_the_grammar_formats_are_the_ones_llguidance_knows():
    probe = [*GRAMMAR_FORMATS, "regex", "byte", "json-pointer", "idn-email", "uri-reference", "color", "int32"]
    known = set()
    for name in probe:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            {"type": "string", "format": name}, overrides=JSON_OPTIONS
        )
        _, warnings = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None)
        if not any("Unknown format" in w for w in warnings):
            known.add(name)
    assert known == GRAMMAR_FORMATS


def test_formats_the_validator_asserts_those_the_grammar_does_not():
    assert checks_format("regex") and checks_format("json-pointer")
    assert not checks_format("date") and not checks_format("email")  # the grammar's
    assert not checks_format("byte") and not checks_format("my-own-format")  # annotations
    assert violation("(unclosed", {"type": "string", "format": "regex"}) is not None
    assert violation("^a+$", {"type": "string", "format": "regex"}) is None
    assert violation("not base64!", {"type": "string", "format": "byte"}) is None


def test_only_what_the_check_enforces_holds_a_streamed_answer_back():
    assert needs_check(enforcement(UNIQUE, "x"))
    assert needs_check(enforcement({"type": "string", "format": "regex"}, "x"))
    assert not needs_check(enforcement({"type": "string", "format": "byte"}, "x"))  # an annotation
    assert not needs_check(enforcement({"type": "array", "items": {"type": "integer"}}, "x"))
    assert AnswerCheck.of(chat(response_format=schema_format(UNIQUE))).held
    assert not AnswerCheck.of(chat(response_format={"type": "json_object"})).held
    assert AnswerCheck.of(chat()) is None


def test_the_verdict_checks_the_schema_as_sent():
    check = AnswerCheck.of(chat(response_format=schema_format({"type": "object", "properties": {"a": UNIQUE}})))
    assert check.verdict(answer('{"a": [1, 2]}')) is None
    assert check.verdict(answer('{"a": [1, 2], "b": 3}')) is None  # closing was the grammar's choice only
    assert "non-unique" in check.verdict(answer('{"a": [1, 1]}')) and "/a" in check.verdict(answer('{"a": [1, 1]}'))
    assert "not JSON" in check.verdict(answer('{"a": '))
    assert "twice" in check.verdict(answer('{"a": [1], "a": [2]}'))  # a map's key written twice
    assert check.verdict(answer('{"a": [1, 1', finish="length")) is None  # cut: incomplete, said so


def test_a_schema_is_read_in_its_own_draft():
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 5, "exclusiveMaximum": True}
    assert violation(5, draft4) is not None and violation(4, draft4) is None
    deps = {"$schema": "http://json-schema.org/draft-07/schema#", "dependencies": {"a": ["b"]}}
    assert violation({"a": 1}, deps) is not None and violation({"a": 1, "b": 2}, deps) is None


def test_a_schema_the_validator_cannot_read_vouches_for_nothing():
    assert "cannot be checked" in violation(1, {"$ref": "https://example.com/nowhere.json"})


def test_tool_calls_are_checked_against_their_tools_parameters():
    tools = [{"type": "function", "function": {"name": "pick", "parameters": {"properties": {"ids": UNIQUE}}}}]
    check = AnswerCheck.of(chat(tools=tools, tool_choice="required"))
    assert check.verdict(answer("", "tool_calls", [call("pick", {"ids": [1, 2]})])) is None
    assert "tools[0].function.parameters" in check.verdict(answer("", "tool_calls", [call("pick", {"ids": [1, 1]})]))
    assert "not among" in check.verdict(answer("", "tool_calls", [call("other", {})]))
    assert "not a tool call" in check.verdict(answer("I will not call it."))
    auto = AnswerCheck.of(chat(tools=tools))
    assert auto.verdict(answer("Just text.")) is None  # auto: text is an answer


def test_a_greedy_retry_samples_at_a_small_temperature_with_a_fixed_seed():
    greedy = chat(temperature=0)
    second, third = retry_fields(greedy, 2, 1), retry_fields(greedy, 3, 2)
    assert second["temperature"] == third["temperature"] == RETRY_TEMPERATURE
    assert second["seed"] != third["seed"] and (second["n"], third["n"]) == (1, 2)
    assert retry_fields(greedy, 2, 1) == second  # reproducible


def test_a_sampled_retry_keeps_the_temperature_and_moves_the_seed():
    seeded = retry_fields(chat(temperature=0.8, seed=7), 2, 1)
    assert "temperature" not in seeded and seeded["seed"] != 7
    assert "seed" not in retry_fields(chat(temperature=0.8), 2, 1)  # random before, random again
    low, high = SEED_RANGE
    assert low <= retry_fields(chat(seed=high), 4, 1)["seed"] <= high


def test_a_completions_retry_leaves_best_of_to_n():
    assert retry_fields(CompletionRequest(prompt="x", n=2, best_of=2), 2, 1)["best_of"] is None


@pytest.mark.parametrize("text", ['{"a": 1}', '{"a": 1, "b": {"c": [1, 2]}}'])
def test_json_object_accepts_any_object(text):
    assert AnswerCheck.of(chat(response_format={"type": "json_object"})).verdict(answer(text)) is None
    assert AnswerCheck.of(chat(response_format={"type": "json_object"})).verdict(answer("[1]")) is not None
