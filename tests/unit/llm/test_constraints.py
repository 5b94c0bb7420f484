"""The grammar module alone (deployments/llm/constraints.py): what a request asks for, the 400s,
the grammars, and masks from the real tokenizers (the tiny Qwen3's special-token markers,
SmolLM2's plain text), walked token by token without a model."""

import json
import random

import jsonschema
import numpy as np
import pytest

from deployments.llm.constraints import (
    ANY_OBJECT,
    JSON_STYLE,
    Constraint,
    Guide,
    Thinking,
    ToolSyntax,
    check_schemas,
    checked_constraint,
    closed_objects,
    enforcement,
    parse_json_calls,
    plan,
    without_lookarounds,
)
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest

MSG = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time"}}  # no parameters: {} only
# Every string, array and number bounded: a random walk through the mask always ends.
BOUNDED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "size": {"type": "integer", "minimum": 0, "maximum": 99},
        "where": {
            "type": "object",
            "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9}},
            "required": ["x"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "ok", "color", "tags", "size", "where"],
    "additionalProperties": False,
}


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=MSG, **fields)


def schema_format(schema, strict=None) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": strict}}


def refused(request) -> APIError:
    with pytest.raises(APIError) as info:
        checked_constraint(request)
    assert info.value.status_code == 400
    return info.value


# ---- what the request asks for ---------------------------------------------------------------


def test_free_text_and_no_tools_is_no_constraint():
    assert Constraint.from_request(chat()) is None
    assert Constraint.from_request(chat(response_format={"type": "text"})) is None
    assert Constraint.from_request(chat(tools=[WEATHER], tool_choice="none")) is None
    assert Constraint.from_request(CompletionRequest(prompt="x")) is None


def test_response_formats():
    assert Constraint.from_request(chat(response_format={"type": "json_object"})).answer == ANY_OBJECT
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    for strict in (None, False, True):  # objects closed either way: no keys the schema does not name
        constraint = Constraint.from_request(chat(response_format=schema_format(schema, strict=strict)))
        assert constraint.answer == schema  # as sent: what the answer is checked against
        grammar = check_schemas(constraint)["response_format"].grammar
        assert grammar["additionalProperties"] is False
        assert grammar["properties"]["a"]["additionalProperties"] is False
    assert schema == {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}  # not changed
    assert Constraint.from_request(CompletionRequest(prompt="x", response_format={"type": "json_object"})).answer


def test_closing_objects_keeps_what_the_schema_says_and_leaves_values_alone():
    schema = {
        "type": "object",
        "additionalProperties": True,
        "properties": {"e": {"enum": [{"type": "object"}]}, "d": {"default": {"properties": {}}}},
    }
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is True
    named = closed_objects({"type": "object", "properties": {"properties": {"type": "string"}}})
    assert named["properties"] == {"properties": {"type": "string"}}  # a property's name, not a keyword
    nested = closed_objects({"$defs": {"P": {"properties": {"a": {}}}}, "anyOf": [{"properties": {"b": {}}}]})
    assert nested["$defs"]["P"]["additionalProperties"] is False and nested["anyOf"][0]["additionalProperties"] is False
    assert closed["properties"]["e"] == {"enum": [{"type": "object"}]}
    assert closed["properties"]["d"] == {"default": {"properties": {}}}


def test_an_object_that_lists_no_properties_stays_open():
    """A free-form map (`{"type": "object"}`) closed could only be `{}`; one whose minProperties
    asks for more keys than it lists could be nothing."""
    assert "additionalProperties" not in closed_objects({"type": "object"})
    assert "additionalProperties" not in closed_objects({"properties": {"a": {}}, "minProperties": 2})
    assert closed_objects({"properties": {"a": {}}, "minProperties": 1})["additionalProperties"] is False


@pytest.mark.parametrize(
    "schema, names",
    [
        # JSONSchemaBench's case: a required property that `properties` leaves out
        ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}, {"a", "b"}),
        ({"properties": {"a": {}}, "dependentRequired": {"a": ["c"]}}, {"a", "c"}),
        ({"properties": {"a": {}}, "dependencies": {"a": ["c"], "d": {"required": ["e"]}}}, {"a", "c", "d", "e"}),
        ({"properties": {"a": {}}, "dependentSchemas": {"a": {"properties": {"f": {"type": "string"}}}}}, {"a", "f"}),
        ({"properties": {"kind": {}}, "if": {"required": ["kind"]}, "then": {"required": ["g"]}}, {"kind", "g"}),
        ({"properties": {"a": {}}, "anyOf": [{"required": ["h"]}, {"required": ["a"]}]}, {"a", "h"}),
    ],
)
def test_closing_keeps_every_property_the_schema_may_require(schema, names):
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False and set(closed["properties"]) == names
    assert enforcement(schema, "response_format").grammar["properties"].keys() == names


def test_a_required_name_a_pattern_allows_is_not_listed_again():
    closed = closed_objects({"patternProperties": {"^x-": {"type": "integer"}}, "required": ["x-a", "b"]})
    assert closed["properties"] == {"b": {}}


def test_closing_does_not_reach_into_not_or_if():
    """Closed there, `not` and `if` would let through more than the schema does."""
    schema = {"not": {"properties": {"a": {}}}, "if": {"properties": {"b": {}}}}
    assert closed_objects(schema) == schema


def test_a_schema_closing_would_make_unsatisfiable_is_compiled_as_sent():
    """llguidance reads `additionalProperties: false` beside an anyOf as closing each branch: the
    branches' own properties could not be written. Closed, nothing compiles; as sent, it does."""
    schema = {
        "type": "object",
        "properties": {},
        "anyOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]}],
    }
    assert enforcement(schema, "response_format").grammar == schema


@pytest.mark.parametrize(
    "schema, left",
    [
        ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "not": {"enum": [{}]}}, '"not"'),
        ({"properties": {"a": {}}, "if": {"required": ["a"]}, "then": {"minProperties": 1}}, '"if"'),
        ({"properties": {"a": {}}, "if": {"required": ["a"]}, "then": {}, "else": {}}, "if/then/else"),
        ({"type": "array", "contains": {"const": 1}}, "contains"),
        ({"oneOf": [{"type": "string"}, {"type": "string", "minLength": 2}]}, "oneOf"),
        (  # branches closing narrows: {"a": 1} matches one closed branch, both as sent
            {"oneOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]},
            "closing objects",
        ),
        ({"type": "string", "format": "regex"}, "regex"),
        ({"type": "string", "pattern": "^(?!admin)[a-z]+$"}, "(?!admin)"),
    ],
)
def test_what_the_grammar_cannot_enforce_is_left_to_the_check_and_named(schema, left):
    found = enforcement(schema, "response_format")
    assert any(left in reason for reason in found.left_to_check), found.left_to_check


@pytest.mark.parametrize(
    "schema, allowed, refused",
    [
        (  # dependentRequired, and dependencies' array form: a absent, or a and b present
            {"properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
            [{}, {"b": 1}, {"a": 1, "b": 2}],
            [{"a": 1}],
        ),
        ({"properties": {"a": {}, "b": {}}, "dependencies": {"a": ["b"]}}, [{"a": 1, "b": 2}], [{"a": 1}]),
        (  # dependentSchemas: a present, then S
            {"properties": {"a": {}, "b": {"type": "integer"}}, "dependentSchemas": {"a": {"required": ["b"]}}},
            [{}, {"a": 1, "b": 2}],
            [{"a": 1}],
        ),
        ({"properties": {"a": {}, "b": {}}, "not": {"required": ["a", "b"]}}, [{"a": 1}, {"b": 1}], [{"a": 1, "b": 2}]),
        ({"type": "string", "format": "json-pointer"}, ["/a/b~1c", ""], ["a/b", "/~2"]),
    ],
)
def test_keywords_llguidance_lacks_are_written_in_its_terms_with_the_same_answers(
    smollm2_guide, schema, allowed, refused
):
    found = enforcement(schema, "response_format")
    assert found.left_to_check == ()  # the grammar is exact: nothing held back for the check
    grammar = smollm2_guide.plan(Constraint.from_request(chat(response_format=schema_format(schema))), False)
    separators = (JSON_STYLE["item_separator"], JSON_STYLE["key_separator"])
    for value in allowed:
        assert accepts(smollm2_guide, grammar.grammar, json.dumps(value, separators=separators)), value
    for value in refused:
        assert not accepts(smollm2_guide, grammar.grammar, json.dumps(value, separators=separators)), value


@pytest.mark.parametrize(
    "pattern, relaxed",
    [
        ("^(?!-)[a-z-]{1,16}$", "^[a-z-]{1,16}$"),
        ("^((?!mode)(?!Mode).)*$", "^(.)*$"),
        ("^(?!(False|None)$)[a-z]+$", "^[a-z]+$"),  # a group inside the look-ahead
        ("(?<=a)b(?<!c)", "b"),
        (r"a\(?!b)", r"a\(?!b)"),  # an escaped parenthesis opens no group
        ("[(?!x)]y", "[(?!x)]y"),  # nor one in a character class
        ("[]()]", "[]()]"),  # a ] first in a class is a character
    ],
)
def test_look_arounds_come_out_of_a_regex_for_the_grammar(pattern, relaxed):
    assert without_lookarounds(pattern) == relaxed


def test_a_pattern_with_look_arounds_is_generated_without_them_and_checked():
    found = enforcement({"type": "string", "pattern": "^(?!admin)[a-z]+$", "maxLength": 5}, "response_format")
    assert found.grammar == {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5}
    keys = enforcement({"patternProperties": {"^(?!@@)[a-z]+$": {"type": "integer"}}}, "response_format")
    assert list(keys.grammar["patternProperties"]) == ["^[a-z]+$"] and "look-around" in keys.left_to_check[0]


def test_a_pattern_the_grammar_cannot_compile_at_all_leaves_the_grammar_only():
    found = enforcement({"type": "string", "pattern": "^(a)\\1$", "maxLength": 5}, "response_format")
    assert found.grammar == {"type": "string", "maxLength": 5}  # a backreference: no regular language
    assert "cannot compile" in found.left_to_check[0]


def test_the_grammar_keeps_the_order_of_the_properties():
    """llguidance writes properties in the schema's order: the answer's order is the client's."""
    schema = {"type": "object", "properties": {"zeta": {}, "alpha": {}}, "required": ["zeta", "mid"]}
    assert list(enforcement(schema, "x").grammar["properties"]) == ["zeta", "alpha", "mid"]


def test_what_the_grammar_enforces_leaves_nothing_to_check():
    assert enforcement(BOUNDED, "response_format").left_to_check == ()
    assert enforcement({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "x").left_to_check == ()  # disjoint


def test_tool_choices():
    auto = Constraint.from_request(chat(tools=[WEATHER, CLOCK]))
    assert (auto.tool_mode, [t.name for t in auto.tools], auto.parallel_tool_calls) == (
        "auto",
        ["get_weather", "get_time"],
        True,
    )
    assert auto.tools[1].parameters == {"type": "object", "properties": {}, "additionalProperties": False}
    required = Constraint.from_request(chat(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False))
    assert (required.tool_mode, required.parallel_tool_calls) == ("required", False)
    named = Constraint.from_request(
        chat(tools=[WEATHER, CLOCK], tool_choice={"type": "function", "function": {"name": "get_time"}})
    )
    assert (named.tool_mode, [t.name for t in named.tools], named.parallel_tool_calls) == (
        "required",
        ["get_time"],
        False,
    )


# ---- the 400s ------------------------------------------------------------------------------


def test_a_forced_tool_that_does_not_exist_is_a_400():
    error = refused(chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}))
    assert error.param == "tool_choice" and "'nope'" in error.message and "get_weather" in error.message


def test_required_without_tools_is_a_400():
    assert refused(chat(tool_choice="required")).param == "tool_choice"
    assert Constraint.from_request(chat(tool_choice="auto", tools=[])) is None  # nothing to call


@pytest.mark.parametrize(
    "schema, says",
    [
        ({"type": "strin"}, "strin"),
        ({"$ref": "#/$defs/missing"}, "missing"),
        ({"$ref": "https://example.com/remote.json"}, "example.com"),  # nothing is fetched
        ({"patternProperties": {"^x": {"type": "string"}, "y$": {}}}, "disjoint"),  # keys both could match
        (  # a recursive $ref merged with sibling keywords: beyond llguidance
            {
                "$defs": {"F": {"properties": {"c": {"allOf": [{"$ref": "#/$defs/F"}, {"properties": {}}]}}}},
                "$ref": "#/$defs/F",
            },
            "circular",
        ),
        ({"type": "string", "pattern": "(["}, "regex"),
        ({"type": "string", "minLength": 3, "maxLength": 2}, "minLength"),
    ],
)
def test_a_schema_that_cannot_be_enforced_is_a_400_that_says_why(schema, says):
    error = refused(chat(response_format=schema_format(schema)))
    assert (error.param, error.code) == ("response_format", "invalid_json_schema")
    assert says in error.message


def test_a_tool_schema_that_cannot_be_enforced_names_the_tool():
    bad = {"type": "function", "function": {"name": "bad", "parameters": {"type": "nope"}}}
    error = refused(chat(tools=[WEATHER, bad], tool_choice="required"))
    assert error.param == "tools[1].function.parameters"


def test_check_schemas_passes_what_it_can_enforce():
    check_schemas(Constraint.from_request(chat(response_format=schema_format(BOUNDED, strict=True))))
    check_schemas(None)


# ---- grammars --------------------------------------------------------------------------------

NATIVE = ToolSyntax("<tool_call>", "</tool_call>")


def test_auto_on_a_model_without_a_call_syntax_leaves_nothing_to_enforce():
    assert plan(Constraint.from_request(chat(tools=[WEATHER])), ToolSyntax(), None) is None
    with_answer = plan(
        Constraint.from_request(chat(tools=[WEATHER], response_format={"type": "json_object"})), ToolSyntax(), None
    )
    assert with_answer is not None and not with_answer.json_calls and "calls" not in with_answer.grammar


def test_forced_calls_without_a_call_syntax_are_the_answers_json():
    forced = plan(Constraint.from_request(chat(tools=[WEATHER], tool_choice="required")), ToolSyntax(), None)
    assert forced.json_calls and 'calls: "["' in forced.grammar
    native = plan(Constraint.from_request(chat(tools=[WEATHER], tool_choice="required")), NATIVE, None)
    assert not native.json_calls


def test_tool_syntax_from_the_tokenizer(tiny_tokenizer, smollm2_tokenizer):
    assert ToolSyntax.of(tiny_tokenizer) == NATIVE  # Qwen3's template: mlx-lm's json_tools
    assert ToolSyntax.of(smollm2_tokenizer) == ToolSyntax()  # no tools in SmolLM2's template


# ---- masks from the real tokenizers ------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_tokenizer(smollm2_dir):
    from mlx_lm.tokenizer_utils import load

    return load(smollm2_dir)


@pytest.fixture(scope="module")
def tiny_guide(tiny_tokenizer, tiny_llm_dir):
    vocab = json.loads((tiny_llm_dir / "config.json").read_text())["vocab_size"]
    return Guide(tiny_tokenizer, vocab)


@pytest.fixture(scope="module")
def smollm2_guide(smollm2_tokenizer):
    return Guide(smollm2_tokenizer)


def walk(guide: Guide, grammar: str, seed: int, limit: int = 400) -> tuple[str, list[int]]:
    """Sample uniformly among the allowed tokens until end-of-sequence: the worst model."""
    rng = random.Random(seed)
    mask = guide.mask(grammar)
    tokens: list[int] = []
    token = None
    while len(tokens) < limit:
        allowed = np.flatnonzero(mask.allowed(token))
        assert len(allowed), "the mask never allows nothing"
        token = int(rng.choice(allowed))
        if token in mask.eos:
            assert mask.finished or mask.matcher.is_accepting()
            return guide.tokenizer.decode_str(tokens), tokens
        tokens.append(token)
    raise AssertionError(f"no end after {limit} tokens: {guide.tokenizer.decode_str(tokens)!r}")


def accepts(guide: Guide, grammar: str, text: str) -> bool:
    matcher = guide.mask(grammar).matcher
    tokens = guide.tokenizer.tokenize_str(text, parse_special=True)
    return matcher.consume_tokens(tokens) and matcher.is_accepting()


@pytest.mark.parametrize("guide_name", ["tiny_guide", "smollm2_guide"])
@pytest.mark.parametrize("seed", range(4))
def test_every_walk_through_a_schema_mask_is_valid_json(request, guide_name, seed):
    guide = request.getfixturevalue(guide_name)
    grammar = guide.plan(Constraint.from_request(chat(response_format=schema_format(BOUNDED))), False)
    text, _ = walk(guide, grammar.grammar, seed)
    jsonschema.validate(json.loads(text), BOUNDED)


def test_the_mask_covers_the_logits_not_just_the_vocabulary(tiny_guide, tiny_tokenizer):
    assert tiny_guide.vocab_size > len(tiny_tokenizer)  # the tiny model's logits are wider
    grammar = tiny_guide.plan(Constraint.from_request(chat(response_format={"type": "json_object"})), False)
    allowed = tiny_guide.mask(grammar.grammar).allowed(None)
    assert allowed.dtype == bool and allowed.shape == (tiny_guide.vocab_size,)
    assert not allowed[len(tiny_tokenizer) :].any()


@pytest.mark.parametrize("seed", range(4))
def test_forced_calls_in_qwens_syntax_parse_with_mlx_lms_parser_and_validate(tiny_guide, tiny_tokenizer, seed):
    request = chat(tools=[WEATHER, CLOCK], tool_choice="required")
    grammar = tiny_guide.plan(Constraint.from_request(request), False)  # no thinking block to walk
    text, _ = walk(tiny_guide, grammar.grammar, seed)
    blocks = [b for b in text.split("<tool_call>") if b.strip()]
    assert blocks and all(b.rstrip().endswith("</tool_call>") for b in blocks)
    for block in blocks:
        call = tiny_tokenizer.tool_parser(block.rstrip().removesuffix("</tool_call>"), None)
        schema = {t["function"]["name"]: t["function"].get("parameters") for t in (WEATHER, CLOCK)}[call["name"]]
        jsonschema.validate(call["arguments"], schema or {"type": "object", "maxProperties": 0})


@pytest.mark.parametrize("seed", range(3))
def test_one_call_only_when_parallel_calls_are_off(smollm2_guide, seed):
    request = chat(tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False)
    grammar = smollm2_guide.plan(Constraint.from_request(request), True)
    text, _ = walk(smollm2_guide, grammar.grammar, seed)
    (call,) = parse_json_calls(text)
    assert call["name"] in ("get_weather", "get_time")


def test_a_named_call_in_auto_mode_is_constrained_from_its_first_token(tiny_guide):
    grammar = tiny_guide.plan(Constraint.from_request(chat(tools=[WEATHER])), True).grammar
    assert accepts(tiny_guide, grammar, "Just text, no call.")
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
    assert accepts(tiny_guide, grammar, "Let me look. " + good)
    assert not accepts(tiny_guide, grammar, '<tool_call>\n{"name": "get_weather", "arguments": {"town": 1}}')
    assert not accepts(tiny_guide, grammar, '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>')


def test_text_markers_are_kept_out_of_free_text(smollm2_guide):
    """A model whose call marker is plain text (SmolLM2 has no such tokens): free text cannot
    contain the marker, so a call that starts is held to the grammar."""
    constraint = Constraint.from_request(chat(tools=[WEATHER]))
    grammar = plan(constraint, NATIVE, None, smollm2_guide.token).grammar
    assert accepts(smollm2_guide, grammar, "plain words")
    assert not accepts(smollm2_guide, grammar, "text <tool_call>\nnot a call")
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome", "unit": "f"}}\n</tool_call>'
    assert accepts(smollm2_guide, grammar, "text " + good)
    assert accepts(smollm2_guide, grammar, good + "\n" + good)
    assert accepts(smollm2_guide, grammar, "a <tool_callx is text")


def test_text_thinking_markers(smollm2_guide):
    """Thinking markers that are plain text (real Qwen3 checkpoints have them as ordinary
    tokens): the block ends at the first end marker, a call or JSON comes after it."""
    thinking = Thinking("<think>", "</think>", inside=False)
    tools = plan(Constraint.from_request(chat(tools=[WEATHER])), NATIVE, thinking, smollm2_guide.token).grammar
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>'
    assert accepts(smollm2_guide, tools, "<think>I could write <tool_call> here</think>\n\n" + good)
    assert accepts(smollm2_guide, tools, "<think>no</think>\nplain answer")
    assert not accepts(smollm2_guide, tools, "<think>no</think>\n<tool_call>\nnot json")
    answer = Constraint.from_request(chat(response_format={"type": "json_object"}))
    inside = plan(answer, NATIVE, Thinking("<think>", "</think>", inside=True), smollm2_guide.token).grammar
    assert accepts(smollm2_guide, inside, 'a {"b": 1} c</think>\n{"a": 1}')
    assert not accepts(smollm2_guide, inside, '{"a": 1}')


def test_thinking_comes_first_when_the_prompt_opened_it(tiny_guide):
    constraint = Constraint.from_request(chat(response_format={"type": "json_object"}))
    inside = tiny_guide.plan(constraint, True, "<|im_start|>assistant\n<think>\n").grammar
    assert accepts(tiny_guide, inside, 'Let me think.</think>\n\n{"a": 1}')
    assert not accepts(tiny_guide, inside, '{"a": 1}')
    outside = tiny_guide.plan(constraint, True, "<|im_start|>assistant\n").grammar
    assert accepts(tiny_guide, outside, '{"a": 1}')
    assert accepts(tiny_guide, outside, '<think>hmm</think>\n{"a": 1}')
    closed = tiny_guide.plan(constraint, True, "assistant\n<think>\n\n</think>\n\n").grammar  # thinking off
    assert not accepts(tiny_guide, closed, '<think>hmm</think>\n{"a": 1}')
    assert accepts(tiny_guide, closed, '{"a": 1}')
    raw = tiny_guide.plan(constraint, False).grammar  # text completions: no thinking
    assert not accepts(tiny_guide, raw, '<think>hmm</think>\n{"a": 1}')


def test_a_token_outside_the_grammar_leaves_only_the_end(tiny_guide, tiny_tokenizer):
    grammar = tiny_guide.plan(Constraint.from_request(chat(response_format={"type": "json_object"})), False)
    mask = tiny_guide.mask(grammar.grammar)
    mask.allowed(None)
    allowed = mask.allowed(tiny_tokenizer.encode("x", add_special_tokens=False)[0])  # JSON starts with {
    assert mask.error and set(np.flatnonzero(allowed)) == set(tiny_tokenizer.eos_token_ids)
    assert mask.steps == 2 and mask.seconds > 0


def test_a_grammar_that_does_not_compile_is_a_400(tiny_guide):
    with pytest.raises(APIError) as info:
        tiny_guide.mask("start: undefined_rule")
    assert info.value.status_code == 400


def test_calls_written_as_json_read_back():
    assert parse_json_calls('[{"name": "f", "arguments": {"a": 1}}, {"name": "g"}]') == [
        {"name": "f", "arguments": {"a": 1}},
        {"name": "g", "arguments": {}},
    ]
    assert parse_json_calls('{"name": "f", "arguments": {}}') == [{"name": "f", "arguments": {}}]
    for bad in ("[]", '[{"arguments": {}}]', "[1]", '{"name": "f"'):
        with pytest.raises(ValueError):
            parse_json_calls(bad)
