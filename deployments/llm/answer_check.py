"""Checking a finished constrained answer against the JSON Schemas as the request sent them, and
what a resampled attempt changes: the part of structured outputs the grammar engine cannot do.

llguidance enforces most of JSON Schema token by token (deployments/llm/constraints.py), but not
all of it: `uniqueItems`, `not`, `if`/`then`/`else`, `dependencies`/`dependentRequired`/
`dependentSchemas`, `contains`, `propertyNames`, oneOf's "exactly one" (generated as anyOf), some
formats, patterns its regex engine cannot compile. Those are left out of the grammar
(`Enforcement.left_to_check`) and enforced here: the finished answer, and each tool call's
arguments, is validated with a maintained validator (jsonschema, the draft the schema's `$schema`
names, 2020-12 by default), and an answer that fails is resampled by the caller
(deployments/ingress/serving/structured.py) within a bounded budget. An answer is never returned
as valid unless it validates.

Formats: the grammar enforces those llguidance knows (`GRAMMAR_FORMATS`); the validator asserts
those jsonschema can check and llguidance does not (`regex`, `json-pointer`, `idn-email`...);
any other format is an annotation, JSON Schema's default.

No Ray, no MLX: pure functions of the request, the schemas and the answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

from deployments.llm.constraints import Constraint, Enforcement, check_schemas
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import SEED_RANGE, CompletionRequest, SamplingRequest

# The finish_reason of a choice whose every attempt failed its schema: no answer is returned.
SCHEMA_NOT_MET = "schema_not_met"
# What a resampled attempt of a greedy request samples at: greedy decoding would write the
# rejected answer again. Low enough to stay near the model's first choice.
RETRY_TEMPERATURE = 0.7
# Where the seeds of resampled attempts start, for a request that sets none: a greedy request's
# retries are then the same every time, as its first attempt is.
RETRY_SEED_BASE = 0x5EED
_SEED_STRIDE = 1_000_003  # attempt k samples with seed + k * stride: keys far apart

# The formats llguidance writes into its grammar (its docs; tests/unit/llm/test_answer_check.py
# probes llguidance for each): the grammar's definition is the one served, the validator does not
# assert them again.
GRAMMAR_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uuid"}
)
_UNKNOWN_FORMAT = "Unknown format: "


@lru_cache(maxsize=1)
def _format_checker():
    """jsonschema's checkers (those its installed extras allow) but the grammar's formats."""
    import jsonschema

    checked = [name for name in jsonschema.FormatChecker.checkers if name not in GRAMMAR_FORMATS]
    return jsonschema.FormatChecker(formats=checked)


def checks_format(name: str) -> bool:
    """A format the validator asserts (one llguidance does not know, jsonschema does)."""
    return name in _format_checker().checkers


def needs_check(enforcement: Enforcement) -> bool:
    """Whether the schema's grammar leaves something to the check: llguidance's warnings, but an
    unknown format nothing here checks (an annotation)."""
    return any(
        not warning.startswith(_UNKNOWN_FORMAT) or checks_format(warning[len(_UNKNOWN_FORMAT) :].strip())
        for warning in enforcement.left_to_check
    )


@lru_cache(maxsize=256)
def _validator(text: str) -> Any:
    import jsonschema

    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=_format_checker())


def violation(value: Any, schema: Any) -> Optional[str]:
    """None when `value` validates against `schema`, else the first error, as the validator says
    it (a schema the validator cannot read counts as a failure: nothing vouches for the answer)."""
    try:
        validator = _validator(json.dumps(schema, ensure_ascii=False))
        error = next(iter(validator.iter_errors(value)), None)
    except Exception as e:  # an unresolvable $ref, a keyword of the wrong type
        return f"the schema cannot be checked: {type(e).__name__}: {e}"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at /{where})" if where else "")


def loads(text: str) -> Any:
    """The JSON value of an answer; a key written twice in one object is an error, not the last
    value (a grammar's map, `additionalProperties` or `patternProperties`, cannot exclude it, and
    parsers disagree on what it means)."""

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in pairs]
        twice = next((key for key in keys if keys.count(key) > 1), None)
        if twice is not None:
            raise ValueError(f"the key {twice!r} is written twice in one object")
        return dict(pairs)

    return json.loads(text, object_pairs_hook=unique)


@dataclass(frozen=True)
class AnswerCheck:
    """What a finished choice of one request must be: its constraint's schemas as sent, and
    whether any of them leaves something to this check (`held`: a streamed choice is then held
    back until it passes, since what was sent cannot be taken back)."""

    constraint: Constraint
    held: bool
    left_to_check: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, request: SamplingRequest) -> Optional[AnswerCheck]:
        """The request's check (its schemas compiled: the 400s of check_schemas), or None when
        nothing is constrained."""
        constraint = Constraint.from_request(request)
        if constraint is None:
            return None
        enforcements = check_schemas(constraint)
        left = tuple(w for e in enforcements.values() if needs_check(e) for w in e.left_to_check)
        return cls(constraint, held=any(needs_check(e) for e in enforcements.values()), left_to_check=left)

    def verdict(self, total: GenerationChunk) -> Optional[str]:
        """None when the finished choice (all its chunks merged) is a valid answer, or was cut by
        max_tokens (incomplete, and said so: nothing to check); else why it is not."""
        if total.finish_reason == "length":
            return None
        constraint = self.constraint
        if total.tool_calls:
            return self._calls_violation(total)
        if constraint.tool_mode == "required":
            return "the answer is not a tool call"
        if constraint.answer is None:
            return None  # free text beside optional calls
        try:
            value = loads(total.content)
        except ValueError as e:
            return f"the answer is not JSON: {e}"
        problem = violation(value, constraint.answer)
        return None if problem is None else f"{constraint.answer_param}: {problem}"

    def _calls_violation(self, total: GenerationChunk) -> Optional[str]:
        tools = {tool.name: tool for tool in self.constraint.tools}
        for call in total.tool_calls:
            tool = tools.get(call.function.name)
            if tool is None:
                return f"a call of '{call.function.name}', which is not among the request's tools"
            try:
                arguments = loads(call.function.arguments)
            except ValueError as e:
                return f"{tool.param}: the arguments are not JSON: {e}"
            problem = violation(arguments, tool.parameters)
            if problem is not None:
                return f"{tool.param}: {problem}"
        return None


def retry_fields(request: SamplingRequest, attempt: int, choices: int) -> dict[str, Any]:
    """What attempt `attempt` (2, 3, ...) of a request changes, for `choices` choices resampled
    together: another seed (each choice then draws from its own key split off it), and for a
    greedy request a small temperature (greedy decoding would write the same answer again). A
    request that sampled without a seed resamples without one; every other request's retries are
    reproducible as its first attempt is."""
    fields: dict[str, Any] = {"n": choices}
    if isinstance(request, CompletionRequest):
        fields["best_of"] = None
    greedy = request.temperature == 0
    if greedy:
        fields["temperature"] = RETRY_TEMPERATURE
    if request.seed is not None or greedy:
        base = request.seed if request.seed is not None else RETRY_SEED_BASE
        low, high = SEED_RANGE
        fields["seed"] = (base + (attempt - 1) * _SEED_STRIDE - low) % (high - low + 1) + low
    return fields
