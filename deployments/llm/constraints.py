"""Constrained decoding: what a request's `response_format` and `tool_choice` allow the model to
write, as an llguidance grammar, and per sequence the token mask that enforces it at each step.

Three steps, each usable without the next:

- `Constraint.from_request`: what the request asks for (a JSON answer, tool calls), with the
  400s for what cannot be served (a forced tool that is not among the tools).
- `check_schemas`: every JSON Schema compiled without a tokenizer, so a schema llguidance cannot
  compile, or a feature it does not support, is a 400 before any token is generated. The ingress
  calls it before a slot sees the request; the replica calls it again.
- `Guide` (one per model, built from its Hugging Face tokenizer): the grammar of one request
  (the prompt's thinking state, the model's tool-call syntax) and a `TokenMask` per choice, the
  matcher that says which tokens may come next after each sampled one.

llguidance (what llama.cpp, vLLM and SGLang use) computes a mask in tens of microseconds from
the tokenizer's token trie. No Ray, no MLX: the engine applies the mask to the logits
(deployments/llm/engine.py).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

import numpy as np

from deployments.protocol.errors import invalid_request
from deployments.protocol.openai import ChatCompletionRequest, NamedToolChoice, ResponseFormat, SamplingRequest

# JSON as json.dumps writes it (what models saw most), with no free whitespace: a model cannot
# spend its tokens on runs of spaces and newlines between the values.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
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
    parameters: dict[str, Any]  # the JSON Schema of the call's arguments
    param: str  # where the request defines it, for error messages


@dataclass(frozen=True)
class Constraint:
    """What the answer must be: a JSON value (`answer`), tool calls, or either."""

    answer: Optional[dict[str, Any]] = None  # the answer's JSON Schema; None: free text
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
    return closed_objects(response_format.json_schema.schema_)


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
    return ToolSpec(function.name, closed_objects(parameters), f"tools[{index}].function.parameters")


# Where a JSON Schema holds other schemas: one, a list of them, a map of names to them.
_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def closed_objects(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever an object leaves it out, strict or
    not: what OpenAI's strict mode requires of every object, and what a client means (left
    open, a small model fills objects with keys of its own). Every answer still validates
    against the schema as sent; `additionalProperties: true` or a schema keeps an object open.
    Only schema positions are walked: a property named "properties" is a name, not a keyword."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA:
        if key in out:
            out[key] = closed_objects(out[key])
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed_objects(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_objects(s) for name, s in out[key].items()}
    if (out.get("type") == "object" or "properties" in out) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


# ---------------------------------------------------------------------------------------------
# Is every schema enforceable? (no tokenizer needed)


def json_grammar(schema: dict[str, Any]) -> str:
    import llguidance

    return llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_STYLE)


def check_schemas(constraint: Optional[Constraint]) -> None:
    """A 400 naming the first schema llguidance cannot compile, and why."""
    import llguidance

    if constraint is None:
        return
    for param, schema in constraint.schemas():
        try:
            grammar = json_grammar(schema)
        except ValueError as e:
            raise invalid_request(f"{param}: not a JSON Schema object: {e}", param, "invalid_json_schema") from None
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, None)
        if is_error:
            raise invalid_request(
                f"{param}: this JSON Schema cannot be enforced: {messages[0]}", param, "invalid_json_schema"
            )


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
        grammar.add(f"answer: %json {_json_body(constraint.answer)}")
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
            self.add(f"arguments_{i}: %json {_json_body(tool.parameters)}")
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


def _json_body(schema: dict[str, Any]) -> str:
    return json.dumps({**schema, "x-guidance": JSON_STYLE}, ensure_ascii=False)


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
