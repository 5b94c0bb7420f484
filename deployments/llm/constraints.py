"""Constrained decoding: what a request's `response_format` and `tool_choice` allow the model to
write, as an llguidance grammar, and per sequence the token mask that enforces it at each step.

Three steps, each usable without the next:

- `Constraint.from_request`: what the request asks for (a JSON answer, tool calls), with the
  400s for what cannot be served (a forced tool that is not among the tools).
- `check_schemas`: every JSON Schema compiled without a tokenizer into the closest grammar
  llguidance can enforce (`Enforcement`: objects closed, what it does not implement left out and
  named), so a schema it cannot compile at all is a 400 before any token is generated. What the
  grammar leaves out is enforced by checking the finished answer against the schema as sent,
  and resampling (deployments/llm/answer_check.py, called by the ingress). The ingress calls it
  before a slot sees the request; the replica calls it again.
- `Guide` (one per model, built from its Hugging Face tokenizer): the grammar of one request
  (the prompt's thinking state, the model's tool-call syntax) and a `TokenMask` per choice, the
  matcher that says which tokens may come next after each sampled one.

llguidance (what llama.cpp, vLLM and SGLang use) computes a mask in tens of microseconds from
the tokenizer's token trie. No Ray, no MLX: the engine applies the mask to the logits
(deployments/llm/engine.py).
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, Optional

import numpy as np

from deployments.protocol.errors import invalid_request
from deployments.protocol.openai import ChatCompletionRequest, NamedToolChoice, ResponseFormat, SamplingRequest

# JSON as json.dumps writes it (what models saw most), with no free whitespace: a model cannot
# spend its tokens on runs of spaces and newlines between the values.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
# `lenient`: a keyword llguidance does not implement (uniqueItems, not, if/then/else,
# dependencies, contains...) or a format it does not know is left out of the grammar and named in
# a warning, not an error; `coerce_one_of`: a oneOf whose branches may overlap is generated as
# anyOf, with a warning. What a warning names is enforced by checking the finished answer against
# the schema as sent (Enforcement.left_to_check; deployments/llm/answer_check.py).
JSON_OPTIONS = {**JSON_STYLE, "lenient": True, "coerce_one_of": True}
ANY_OBJECT: dict[str, Any] = {"type": "object"}
NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
# Newlines or spaces a model writes after its thinking, before the answer.
_AFTER_THINKING = r"/[ \n]{0,4}/"
_ANY_TEXT = r"/(?s:.*)/"

ToolMode = Literal["none", "auto", "required"]


# ---------------------------------------------------------------------------------------------
# What the request asks for


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any]  # the JSON Schema of the call's arguments, as sent
    param: str  # where the request defines it, for error messages


@dataclass(frozen=True)
class Constraint:
    """What the answer must be: a JSON value (`answer`), tool calls, or either."""

    answer: Optional[dict[str, Any]] = None  # the answer's JSON Schema as sent; None: free text
    answer_param: str = "response_format"
    tools: tuple[ToolSpec, ...] = ()
    tool_mode: ToolMode = "none"  # required: one call or more; auto: text or calls
    parallel_tool_calls: bool = True  # false: at most one call

    @classmethod
    def from_request(cls, request: SamplingRequest) -> Optional[Constraint]:
        """None when nothing is constrained (free text, and no tools to call)."""
        answer = answer_schema(request.response_format)
        mode: ToolMode = "none"
        tools: tuple[ToolSpec, ...] = ()
        parallel = True
        if isinstance(request, ChatCompletionRequest):
            mode, tools = _tool_choice(request)
            parallel = request.parallel_tool_calls is not False and not isinstance(request.tool_choice, NamedToolChoice)
        if answer is None and mode == "none":
            return None
        return cls(answer=answer, tools=tools, tool_mode=mode, parallel_tool_calls=parallel)

    def schemas(self) -> list[tuple[str, dict[str, Any]]]:
        """Every JSON Schema the answer may have to follow, with where the request set it."""
        found = [(self.answer_param, self.answer)] if self.answer is not None else []
        return found + [(tool.param, tool.parameters) for tool in self.tools]


def answer_schema(response_format: Optional[ResponseFormat]) -> Optional[dict[str, Any]]:
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return ANY_OBJECT
    return response_format.json_schema.schema_


def _tool_choice(request: ChatCompletionRequest) -> tuple[ToolMode, tuple[ToolSpec, ...]]:
    choice = request.tool_choice
    defined = request.tools or []
    if choice is None:
        choice = "auto" if defined else "none"
    if choice == "none":
        return "none", ()
    if not defined:
        if choice == "auto":  # nothing to call
            return "none", ()
        raise invalid_request("tool_choice: a required or named tool_choice needs tools", "tool_choice")
    tools = tuple(_tool_spec(i, tool.function) for i, tool in enumerate(defined))
    if isinstance(choice, NamedToolChoice):
        named = [t for t in tools if t.name == choice.function.name]
        if not named:
            names = ", ".join(t.name for t in tools)
            raise invalid_request(
                f"tool_choice: function '{choice.function.name}' is not among the request's tools ({names})",
                "tool_choice",
            )
        return "required", (named[0],)
    return choice, tools


def _tool_spec(index: int, function: Any) -> ToolSpec:
    parameters = function.parameters if function.parameters is not None else NO_ARGUMENTS
    return ToolSpec(function.name, parameters, f"tools[{index}].function.parameters")


# Where a JSON Schema holds other schemas that an answer's values must match (closing an object
# there narrows what the grammar allows): one, a list of them, a map of names to them. Not `not`
# or `if` (closing there would widen what passes them), nor the keywords the grammar leaves to the
# check (their subschemas never reach the grammar).
_SUBSCHEMA = ("items", "additionalItems", "additionalProperties")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
# Keywords whose subschemas may require or describe properties of the object they sit in.
_CONDITIONAL = ("if", "then", "else")
_DEPENDENT = ("dependencies", "dependentSchemas", "dependentRequired")


def _subschemas(schema: dict[str, Any], fn: Any) -> dict[str, Any]:
    """`schema` with `fn` applied to each subschema in a position an answer's values must match."""
    out = dict(schema)
    for key in _SUBSCHEMA:
        if isinstance(out.get(key), dict):
            out[key] = fn(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [fn(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: fn(s) for name, s in out[key].items()}
    return out


def closed_objects(schema: Any) -> Any:
    """The schema with `additionalProperties: false` on every object that lists its properties
    and leaves additionalProperties out, strict or not: what OpenAI's strict mode requires of
    every object, and what a client means (left open, a small model fills objects with keys of
    its own). An object that lists none (`{"type": "object"}`, a free-form map) stays open:
    closed, it could only be `{}`; so does one whose `minProperties` asks for more keys than it
    lists. Closing never makes a property the schema may require impossible: a name that
    `required`, `dependentRequired`/`dependencies`, an `if`/`then`/`else` or dependent schema, or
    a combinator's branch that lists no properties of its own names but `properties` does not
    list joins the properties as any value. Only schema positions are walked: a property named
    "properties" is a name, not a keyword. What the grammar allows is then a subset of what the
    schema allows; answers are checked against the schema as sent (deployments/llm/answer_check.py)."""
    if not isinstance(schema, dict):
        return schema
    out = _subschemas(schema, closed_objects)
    listed = out.get("properties")
    patterns = out.get("patternProperties")
    if not isinstance(listed, dict) and not isinstance(patterns, dict):
        return out
    if "additionalProperties" in out or "unevaluatedProperties" in out:
        return out
    listed, patterns = dict(listed or {}), list(patterns or {})
    for name in _names_it_may_need(out):
        if name not in listed and not any(_matches(p, name) for p in patterns):
            listed[name] = {}
    least = out.get("minProperties")
    if not patterns and isinstance(least, int) and least > len(listed):
        return out
    return {**out, "properties": listed, "additionalProperties": False}


def _names_it_may_need(schema: dict[str, Any]) -> list[str]:
    """Property names the schema may require of its object, or describes under a condition."""
    names = list(_strings(schema.get("required")))
    parts = [schema.get(key) for key in _CONDITIONAL]
    for key in ("allOf", "anyOf", "oneOf"):  # branches that constrain this object's keys
        parts += [b for b in schema.get(key) or () if isinstance(b, dict) and "properties" not in b]
    for key in _DEPENDENT:
        for name, dependent in (schema.get(key) or {}).items() if isinstance(schema.get(key), dict) else ():
            names.append(name)
            names += _strings(dependent)  # dependentRequired, or dependencies' array form
            parts.append(dependent)  # dependentSchemas, or dependencies' schema form
    for part in parts:
        if isinstance(part, dict):
            names += _strings(part.get("required"))
            names += list(part["properties"]) if isinstance(part.get("properties"), dict) else []
    return list(dict.fromkeys(names))


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return False


# ---------------------------------------------------------------------------------------------
# How each schema is enforced (no tokenizer needed)


@dataclass(frozen=True)
class Enforcement:
    """How one JSON Schema is enforced: `grammar`, the schema the grammar is compiled from (objects
    closed, keywords llguidance lacks written in its terms where that can be done, patterns it
    cannot compile relaxed or left out), and `left_to_check`, what that grammar does not enforce,
    in llguidance's words where they are its warnings ("Unimplemented keys: [\"uniqueItems\"]",
    "oneOf not fully supported, falling back to anyOf...", "Unknown format: regex"), which the
    finished answer's check against the schema as sent enforces (deployments/llm/answer_check.py).
    Empty: the grammar is the schema, every answer it allows is valid."""

    grammar: dict[str, Any]
    left_to_check: tuple[str, ...] = ()


def json_grammar(schema: dict[str, Any]) -> str:
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_OPTIONS)


def _compile(schema: dict[str, Any]) -> tuple[Optional[str], list[str]]:
    """(None, warnings) when llguidance compiles the schema, else (its error, [])."""
    import llguidance

    try:
        grammar = json_grammar(schema)
    except ValueError as e:
        return f"not a JSON Schema object: {e}", []
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None)
    return (messages[0], []) if is_error else (None, messages)


def _left_to_the_validator(pattern: str) -> bool:
    """A regex the validator reads (Python's `re`) and llguidance's regex engine does not
    (look-around, backreferences). One neither reads is the schema's error, a 400."""
    try:
        re.compile(pattern)
    except re.error:
        return False
    return _compile({"type": "string", "pattern": pattern})[0] is not None


# Formats llguidance does not know whose syntax is a regular expression (RFC 6901, and the
# relative form's draft): written into the grammar as a pattern.
_FORMAT_PATTERNS = {
    "json-pointer": "^(/([^~/]|~[01])*)*$",
    "relative-json-pointer": "^(0|[1-9][0-9]*)(#|(/([^~/]|~[01])*)*)$",
}


def _in_grammar_terms(schema: Any, approximated: list[str]) -> Any:
    """`schema` with keywords llguidance does not implement rewritten into ones it does, for the
    grammar only (the check reads the schema as sent):

    - `dependentRequired` and `dependencies` {a: [b]}: a absent, or a and b present;
    - `dependentSchemas` and `dependencies` {a: S}: a absent, or a present and S;
    - `not: {"required": [a, b]}`: a absent or b absent;
    - a `json-pointer` or `relative-json-pointer` format: its syntax as a pattern;

    each as anyOf branches with a property `false` (absent): the same answers as the keyword.
    And `if`/`then`/`else` with an else, as (if and then) or else: more answers than the keyword
    (one that passes `if` and `else` but not `then`), so it is named in `approximated` and the
    check decides. Applied after objects are closed: the branches constrain their object's keys,
    they are not objects of their own."""
    if not isinstance(schema, dict):
        return schema
    out = _subschemas(schema, lambda sub: _in_grammar_terms(sub, approximated))
    conjuncts: list[Any] = []
    for key in ("dependentRequired", "dependencies", "dependentSchemas"):
        deps = out.get(key)
        if not isinstance(deps, dict):
            continue
        for name, dependent in deps.items():
            if isinstance(dependent, list):
                present: Any = {"required": [name, *_strings(dependent)]}
            else:
                present = {"allOf": [{"required": [name]}, _in_grammar_terms(dependent, approximated)]}
            conjuncts.append({"anyOf": [{"properties": {name: False}}, present]})
        del out[key]
    negated = out.get("not")
    if isinstance(negated, dict) and set(negated) == {"required"} and _strings(negated["required"]):
        conjuncts.append({"anyOf": [{"properties": {name: False}} for name in _strings(negated["required"])]})
        del out["not"]
    if isinstance(out.get("if"), dict) and isinstance(out.get("else"), dict):
        condition, then = out.pop("if"), out.pop("then", {})
        branches = [{"allOf": [condition, then]}, out.pop("else")]
        conjuncts.append({"anyOf": [_in_grammar_terms(b, approximated) for b in branches]})
        approximated.append("if/then/else: generated as (if and then) or else")
    pattern = _FORMAT_PATTERNS.get(out.get("format"))
    if pattern is not None and "pattern" not in out:
        out["pattern"] = pattern
        del out["format"]
    if conjuncts:
        out["allOf"] = [*out.get("allOf", []), *conjuncts] if isinstance(out.get("allOf"), list) else conjuncts
    return out


_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")


def without_lookarounds(pattern: str) -> str:
    """The regex with its look-around groups taken out: it matches everything the regex matches
    (an assertion dropped), and llguidance's regex engine may compile it. Escapes and character
    classes are read, so a parenthesis in them is no group."""
    out, i, depth, skip_from = [], 0, 0, None
    in_class = False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            if skip_from is None:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "]":  # a ] first in a class is a character
                if skip_from is None:
                    out.append("[]")
                i += 2
                continue
        elif ch == "(":
            if skip_from is None and pattern.startswith(_LOOKAROUNDS, i):
                skip_from = depth
            depth += 1
        elif ch == ")":
            depth -= 1
            if skip_from is not None and depth == skip_from:
                skip_from = None
                i += 1
                continue
        if skip_from is None:
            out.append(ch)
        i += 1
    return "".join(out)


def _grammar_pattern(pattern: str) -> Optional[str]:
    """A regex llguidance compiles in place of one it does not: without its look-arounds (more
    strings match it), or None (the pattern is left out of the grammar)."""
    relaxed = without_lookarounds(pattern)
    return relaxed if relaxed != pattern and _compile({"type": "string", "pattern": relaxed})[0] is None else None


def _without_patterns(schema: Any, dropped: list[str]) -> Any:
    """`schema` with the regexes llguidance's regex engine cannot compile and the validator can
    relaxed for the grammar (their look-arounds taken out) or left out: a string's `pattern`, a
    `patternProperties` key. Each is named in `dropped`: the check enforces it."""
    if not isinstance(schema, dict):
        return schema
    out = _subschemas(schema, lambda s: _without_patterns(s, dropped))
    pattern = out.get("pattern")
    if isinstance(pattern, str) and _left_to_the_validator(pattern):
        relaxed = _grammar_pattern(pattern)
        if relaxed is None:
            del out["pattern"]
            dropped.append(f"pattern /{pattern}/ (the grammar engine cannot compile it)")
        else:
            out["pattern"] = relaxed
            dropped.append(f"pattern /{pattern}/, generated as /{relaxed}/ (look-around)")
    keys = out.get("patternProperties")
    if isinstance(keys, dict) and any(_left_to_the_validator(key) for key in keys):
        renamed = {}
        for key, value in keys.items():
            relaxed = _grammar_pattern(key) if _left_to_the_validator(key) else None
            if relaxed is not None:
                dropped.append(f"patternProperties /{key}/, generated as /{relaxed}/ (look-around)")
            renamed[relaxed or key] = value
        out["patternProperties"] = renamed
    return out


@lru_cache(maxsize=256)
def _enforcement(text: str) -> Enforcement | str:
    """The closest grammar llguidance compiles for the schema (its JSON text), or why none. Tried
    in turn: the schema with objects closed and unimplemented keywords in grammar terms; closed
    only; then both as sent, should closing have made it unsatisfiable (a case closed_objects
    does not foresee); each of them without the patterns llguidance cannot compile, which are
    left to the check."""
    schema = json.loads(text)
    sent = _known_dialect(schema)
    closed = closed_objects(sent)
    # Closed branches can match fewer answers than open ones: one that matches exactly one
    # closed branch may match two as sent.
    one_of = ["oneOf: exactly one branch, as sent (closing objects changes which branches match)"]
    first_error = None
    for base, left in ((closed, one_of if _closes_one_of(sent) else []), (sent, [])):
        approximated: list[str] = []
        for candidate, notes in ((_in_grammar_terms(base, approximated), approximated), (base, [])):
            found = _compiled(candidate, left + notes)
            if isinstance(found, Enforcement):
                return found
            first_error = first_error or found
        if closed == sent:
            break
    return first_error


def _compiled(candidate: dict[str, Any], left: list[str]) -> Enforcement | str:
    """The candidate's Enforcement, without the patterns llguidance cannot compile if need be;
    else llguidance's error."""
    error, warnings = _compile(candidate)
    if error is None:
        return Enforcement(candidate, _left_to_check(warnings + left))
    dropped: list[str] = []
    relaxed = _without_patterns(candidate, dropped)
    if dropped:
        relaxed_error, warnings = _compile(relaxed)
        if relaxed_error is None:
            return Enforcement(relaxed, _left_to_check(warnings + left + dropped))
    return error


def _known_dialect(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without a `$schema` that names no JSON Schema draft (Snowplow's self-describing
    meta-schema, say): llguidance would try to fetch it; the validator reads it as 2020-12."""
    dialect = schema.get("$schema")
    if isinstance(dialect, str) and not re.match(r"https?://json-schema\.org/", dialect):
        return {k: v for k, v in schema.items() if k != "$schema"}
    return schema


def _closes_one_of(schema: Any) -> bool:
    """Whether closing objects changes a branch of some oneOf in the schema."""
    if not isinstance(schema, dict):
        return False
    branches = schema.get("oneOf") if isinstance(schema.get("oneOf"), list) else []
    if any(closed_objects(branch) != branch for branch in branches):
        return True
    found: list[bool] = []
    _subschemas(schema, lambda sub: found.append(_closes_one_of(sub)))
    return any(found)


def _left_to_check(warnings: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(warnings))


def enforcement(schema: Any, param: str) -> Enforcement:
    """How `schema` is enforced; a 400 naming `param` when llguidance compiles nothing close."""
    if not isinstance(schema, dict):
        raise invalid_request(f"{param}: not a JSON Schema object", param, "invalid_json_schema")
    # The text as sent, keys unsorted: the order of `properties` is the order the answer writes them.
    found = _enforcement(json.dumps(schema, ensure_ascii=False))
    if isinstance(found, str):
        raise invalid_request(f"{param}: this JSON Schema cannot be enforced: {found}", param, "invalid_json_schema")
    return found


def check_schemas(constraint: Optional[Constraint]) -> dict[str, Enforcement]:
    """How each schema of the constraint is enforced, by where the request sets it; a 400 naming
    the first schema llguidance cannot compile, and why."""
    if constraint is None:
        return {}
    return {param: enforcement(schema, param) for param, schema in constraint.schemas()}


def checked_constraint(request: SamplingRequest) -> Optional[Constraint]:
    """The request's constraint, every schema in it checked (what the ingress calls)."""
    constraint = Constraint.from_request(request)
    check_schemas(constraint)
    return constraint


# ---------------------------------------------------------------------------------------------
# The grammar of one sequence


@dataclass(frozen=True)
class Thinking:
    """The model's thinking markers, and whether the prompt left the model inside a block."""

    start: str
    end: str
    inside: bool


@dataclass(frozen=True)
class ToolSyntax:
    """How the model writes a tool call. `start`/`end` set: between the model's own markers, as
    `{"name": ..., "arguments": ...}` JSON (Qwen, Hermes: mlx-lm's json_tools parser). Unset:
    the model has no such syntax (or one whose calls are not JSON), and a forced call is the
    whole answer, a JSON list of such objects, read back by `parse_json_calls`."""

    start: Optional[str] = None
    end: Optional[str] = None

    @property
    def native(self) -> bool:
        return self.start is not None

    @classmethod
    def of(cls, tokenizer: Any) -> ToolSyntax:
        """From mlx-lm's TokenizerWrapper (it infers the parser from the chat template)."""
        parser = getattr(tokenizer, "tool_parser", None)
        module = getattr(parser, "__module__", "") or ""
        start, end = getattr(tokenizer, "tool_call_start", None), getattr(tokenizer, "tool_call_end", None)
        if module.endswith(".json_tools") and start and end:
            return cls(start, end)
        return cls()


@dataclass(frozen=True)
class Plan:
    """A sequence's grammar, and whether its tool calls come as the answer's JSON."""

    grammar: str
    json_calls: bool


def plan(
    constraint: Constraint,
    syntax: ToolSyntax,
    thinking: Optional[Thinking],
    token: Any = json.dumps,
) -> Optional[Plan]:
    """The Lark grammar (llguidance's dialect) for one sequence, or None when nothing is left
    to enforce (tool calls in 'auto' on a model with no call syntax of its own: its calls
    cannot be told from text). `token(text)` writes a marker as a grammar element: a special
    token reference where the tokenizer has one, else the text."""
    mode = constraint.tool_mode
    if mode == "auto" and not syntax.native:
        mode = "none"  # an answer the model starts as a call is still parsed as one, unconstrained
    if constraint.answer is None and mode == "none":
        return None
    grammar = _Grammar(token)
    grammar.start(thinking)
    if constraint.answer is not None:
        grammar.add(f"answer: %json {_json_body(constraint.answer, constraint.answer_param)}")
    if mode != "none":
        grammar.calls(constraint, syntax)
    if mode == "none":
        grammar.add("body: answer")
    elif mode == "required":
        grammar.add("body: calls")
    elif constraint.answer is not None:
        grammar.add("body: answer | calls")
    else:
        grammar.text_or_calls(syntax, constraint.parallel_tool_calls)
    return Plan(grammar.text(), json_calls=mode != "none" and not syntax.native)


class _Grammar:
    """Builds the rules. Markers are special tokens (never part of text) or plain text; free
    text before a text marker is a lazy lexeme that ends at the marker (a greedy one would eat
    it), as llguidance's docs advise."""

    def __init__(self, token: Any):
        self.token = token
        self.rules = ["%llguidance {}"]
        self.not_first = ""  # text the body must not start with (an optional thinking block's marker)

    def add(self, rule: str) -> None:
        self.rules.append(rule)

    def text(self) -> str:
        return "\n".join(self.rules)

    def special(self, marker: str) -> bool:
        return self.token(marker).startswith("<")

    def start(self, thinking: Optional[Thinking]) -> None:
        if thinking is None:
            self.add("start: body")
            return
        self.add(f"AFTER_THINKING: {_AFTER_THINKING}")
        self.up_to("thinking_text", thinking.end)
        if thinking.inside:
            self.add("start: thinking_text AFTER_THINKING body")
            return
        self.add("start: thinking? body")
        self.add(f"thinking: {self.token(thinking.start)} thinking_text AFTER_THINKING")
        if not self.special(thinking.start):  # else a body starting with it could take it as text
            self.not_first = thinking.start

    def up_to(self, name: str, marker: str) -> None:
        """`name`: any text, then the marker (its first occurrence)."""
        if self.special(marker):
            self.add(f"{name}: {_ANY_TEXT} {self.token(marker)}")
        else:
            self.add(f"{name}[lazy]: /(?s:.*){_regex_literal(marker)}/{self._not_first()}")

    def _not_first(self) -> str:
        return f" & ~/{_regex_literal(self.not_first)}(?s:.*)/" if self.not_first else ""

    def calls(self, constraint: Constraint, syntax: ToolSyntax) -> None:
        names = []
        for i, tool in enumerate(constraint.tools):
            head = json.dumps(
                f'{{"name": {json.dumps(tool.name, ensure_ascii=False)}, "arguments": ', ensure_ascii=False
            )
            self.add(f'call_{i}: {head} arguments_{i} "}}"')
            self.add(f"arguments_{i}: %json {_json_body(tool.parameters, tool.param)}")
            names.append(f"call_{i}")
        self.add("call_body: " + " | ".join(names))
        more = "more_calls" if constraint.parallel_tool_calls else ""
        if syntax.native:
            self.add(f'call_rest: "\\n" call_body "\\n" {self.token(syntax.end)}')
            self.add(f"call: {self.token(syntax.start)} call_rest")
            self.add(f"calls: call {more}")
            self.add('more_calls: ("\\n" call)*')
        else:
            self.add(f'calls: "[" call_body {more} "]"')
            self.add('more_calls: (", " call_body)*')

    def text_or_calls(self, syntax: ToolSyntax, parallel: bool) -> None:
        """'auto' with free text: text, then optionally calls; only the marker starts one."""
        more = "more_calls" if parallel else ""
        if self.special(syntax.start):
            self.add(f"body: TEXT calls?\nTEXT: {_ANY_TEXT}{self._not_first()}")
            return
        marker = _regex_literal(syntax.start)
        self.add(f"body: TEXT | call_start call_rest {more}")
        self.up_to("call_start", syntax.start)
        self.add(f"TEXT: {_ANY_TEXT} & ~/(?s:.*){marker}(?s:.*)/{self._not_first()}")


def _json_body(schema: dict[str, Any], param: str) -> str:
    """The schema's grammar (its Enforcement) as a %json element's body."""
    return json.dumps({**enforcement(schema, param).grammar, "x-guidance": JSON_OPTIONS}, ensure_ascii=False)


_REGEX_META = set("\\.+*?()|[]{}^$#&-~")


def _regex_literal(text: str) -> str:
    out = []
    for ch in text:
        if ch in _REGEX_META:
            out.append("\\" + ch)
        elif ch == "/":
            out.append("\\x2F")  # the grammar's regex delimiter
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Per model: the tokenizer's token trie, grammars compiled into matchers


class Guide:
    """Grammars for one model. Building it walks the whole vocabulary (about a second for 50k
    tokens), so an engine makes one, on its first constrained request."""

    def __init__(self, tokenizer: Any, vocab_size: Optional[int] = None):
        """`tokenizer`: mlx-lm's TokenizerWrapper (or a Hugging Face fast tokenizer);
        `vocab_size`: the width of the model's logits, when it is wider than the vocabulary."""
        import llguidance
        import llguidance.hf

        hf = getattr(tokenizer, "_tokenizer", tokenizer)
        eos = sorted(getattr(tokenizer, "eos_token_ids", None) or [hf.eos_token_id])
        try:
            self.tokenizer = llguidance.hf.from_tokenizer(hf, n_vocab=vocab_size, eos_token=eos)
        except Exception as e:  # a slow (Python) tokenizer, a vocabulary llguidance cannot read
            raise invalid_request(
                f"Constrained decoding is not available for this model: its tokenizer cannot be read for it ({e})",
                "response_format",
                "constrained_decoding_unavailable",
            ) from None
        self.vocab_size = self.tokenizer.vocab_size
        self.syntax = ToolSyntax.of(tokenizer)
        self.has_thinking = bool(getattr(tokenizer, "has_thinking", False))
        self.think_markers = (getattr(tokenizer, "think_start", None), getattr(tokenizer, "think_end", None))

    def token(self, text: str) -> str:
        """A marker as a grammar element: its special token where it is one, else its text."""
        ids = self.tokenizer.tokenize_str(text, parse_special=True)
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return json.dumps(text, ensure_ascii=False)

    def plan(self, constraint: Constraint, split_reasoning: bool, prompt_end: str = "") -> Optional[Plan]:
        """`split_reasoning`: a chat answer (thinking allowed first); `prompt_end`: the last
        characters of the prompt, which say whether the template opened a thinking block, or
        opened and closed one already (Qwen3 with enable_thinking false)."""
        thinking = None
        start, end = self.think_markers
        if split_reasoning and self.has_thinking and start and end:
            inside = prompt_end.rfind(start) > prompt_end.rfind(end)
            if inside or not prompt_end.rstrip().endswith(end):
                thinking = Thinking(start, end, inside)
        return plan(constraint, self.syntax, thinking, self.token)

    def mask(self, grammar: str) -> TokenMask:
        """A fresh matcher for one sequence; a grammar that does not compile is a 400."""
        import llguidance

        matcher = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise invalid_request(
                f"The answer's constraint cannot be compiled for this model: {matcher.get_error()}",
                "response_format",
                "invalid_json_schema",
            )
        return TokenMask(matcher, self.vocab_size, self.tokenizer.eos_tokens)

    def masks(self, grammar: str, n: int) -> list[TokenMask]:
        """One matcher per choice of a request: the grammar compiled once, the others copies
        of the fresh matcher (each choice consumes its own tokens)."""
        first = self.mask(grammar)
        return [first] + [first.copy() for _ in range(n - 1)]


@dataclass
class TokenMask:
    """One sequence's matcher: after each sampled token, the tokens allowed next."""

    matcher: Any
    width: int
    eos: list[int]
    seconds: float = 0.0  # spent computing masks, wall time (the engine reports it per token)
    cpu_seconds: float = 0.0  # the same, this thread's CPU time (wall time counts waiting for a core)
    steps: int = 0
    error: str = ""
    _bits: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        self._bits = np.full((1, (self.width + 31) // 32), -1, dtype=np.int32)

    def advance(self, token: Optional[int]) -> None:
        """Consume the token just sampled (None before the first). A token the grammar did
        not allow (it cannot happen unless the mask was bypassed) sets `error`; after it, and
        after an end-of-sequence (the batch computes one step past an end), only
        end-of-sequence is allowed."""
        if token is None or token in self.eos or self.error:
            return
        if not self.matcher.consume_token(token):
            self.error = self.matcher.get_error() or f"token {token} was not allowed"

    def fill(self, bits: np.ndarray, row: int = 0) -> None:
        """Write the mask of the next token into row `row` of a packed bitmask (int32 words,
        llguidance's layout: bit i of word j allows token 32*j + i)."""
        import llguidance.numpy

        if self.error:
            words = bits.view(np.uint32)
            words[row] = 0
            for token in self.eos:
                words[row, token // 32] |= np.uint32(1 << (token % 32))
        else:
            llguidance.numpy.fill_next_token_bitmask(self.matcher, bits, row)

    def allowed(self, token: Optional[int]) -> np.ndarray:
        """The mask after `token` (None for the first token), as booleans over the logits."""
        t0, cpu0 = time.perf_counter(), time.thread_time()
        self.advance(token)
        self.fill(self._bits)
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.width].view(bool)
        self.timed(time.perf_counter() - t0, time.thread_time() - cpu0)
        return allowed

    def timed(self, seconds: float, cpu_seconds: float) -> None:
        """One mask computed in `seconds` (wall) and `cpu_seconds` (the computing thread's)."""
        self.seconds += seconds
        self.cpu_seconds += cpu_seconds
        self.steps += 1

    def copy(self) -> TokenMask:
        """A matcher in this one's state with none of its statistics: another sequence's."""
        return TokenMask(self.matcher.deep_copy(), self.width, list(self.eos))

    @property
    def finished(self) -> bool:
        """The grammar is complete: only end-of-sequence may follow."""
        return self.matcher.is_stopped()


class GuideCache:
    """An engine's Guide, built once on first use (thread-safe: requests race for it)."""

    def __init__(self):
        self._guide: Optional[Guide] = None
        self._lock = threading.Lock()

    def get(self, tokenizer: Any, vocab_size: Optional[int]) -> Guide:
        with self._lock:
            if self._guide is None:
                self._guide = Guide(tokenizer, vocab_size)
            return self._guide


# ---------------------------------------------------------------------------------------------
# Reading the calls back


def parse_json_calls(text: str, tools: Any = None) -> list[dict[str, Any]]:
    """Tool calls written as the answer's JSON (`ToolSyntax` without markers): a list of
    `{"name", "arguments"}` objects, or one such object."""
    calls = json.loads(text)
    calls = calls if isinstance(calls, list) else [calls]
    if not calls or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls):
        raise ValueError("not a list of {name, arguments} objects")
    return [{"name": c["name"], "arguments": c.get("arguments", {})} for c in calls]
