"""Open Responses conformance checks (specification 2026-04-24), shared by the in-process and
the end-to-end tests: every response object, stream event, WebSocket error envelope and
compaction object this server sends is held to the fields the spec requires, with their types.

Two judges: `problems()` below, written here from the spec's text and its OpenAPI schemas
(ResponseResource, the streaming events, WebSocketErrorEvent, CompactResource), which says what
is wrong in words; and the `openresponses-types` package (PyPI, pydantic models generated from
the spec's OpenAPI by a third party), which must parse the same object. Each returns a list of
problems; an empty list is a pass.
"""

from __future__ import annotations

from typing import Any

import openresponses_types as spec_types
from pydantic import TypeAdapter, ValidationError

NUMBER, INTEGER, STRING, BOOL = (int, float), int, str, bool
NULLABLE = type(None)
OBJECT, ARRAY = dict, list

# ResponseResource: every property is required; the nullable ones may be null.
RESPONSE_FIELDS: dict[str, tuple] = {
    "id": (STRING,),
    "object": (STRING,),
    "created_at": (INTEGER,),
    "completed_at": (INTEGER, NULLABLE),
    "status": (STRING,),
    "incomplete_details": (OBJECT, NULLABLE),
    "model": (STRING,),
    "previous_response_id": (STRING, NULLABLE),
    "instructions": (STRING, NULLABLE),
    "output": (ARRAY,),
    "error": (OBJECT, NULLABLE),
    "tools": (ARRAY,),
    "tool_choice": (STRING, OBJECT),
    "truncation": (STRING,),
    "parallel_tool_calls": (BOOL,),
    "text": (OBJECT,),
    "top_p": NUMBER,
    "presence_penalty": NUMBER,
    "frequency_penalty": NUMBER,
    "top_logprobs": (INTEGER,),
    "temperature": NUMBER,
    "reasoning": (OBJECT, NULLABLE),
    "usage": (OBJECT, NULLABLE),
    "max_output_tokens": (INTEGER, NULLABLE),
    "max_tool_calls": (INTEGER, NULLABLE),
    "store": (BOOL,),
    "background": (BOOL,),
    "service_tier": (STRING,),
    "metadata": (OBJECT,),
    "safety_identifier": (STRING, NULLABLE),
    "prompt_cache_key": (STRING, NULLABLE),
}
FUNCTION_TOOL_FIELDS = {
    "type": (STRING,),
    "name": (STRING,),
    "description": (STRING, NULLABLE),
    "parameters": (OBJECT, NULLABLE),
    "strict": (BOOL, NULLABLE),
}
USAGE_FIELDS = {
    "input_tokens": (INTEGER,),
    "output_tokens": (INTEGER,),
    "total_tokens": (INTEGER,),
    "input_tokens_details": (OBJECT,),
    "output_tokens_details": (OBJECT,),
}
# Output items: every item has id, type and status (the spec's "required item fields"), and
# each standard type its own.
ITEM_FIELDS = {
    "message": {"id": (STRING,), "status": (STRING,), "role": (STRING,), "content": (ARRAY,)},
    "function_call": {
        "id": (STRING,),
        "call_id": (STRING,),
        "name": (STRING,),
        "arguments": (STRING,),
        "status": (STRING,),
    },
    "reasoning": {"id": (STRING,), "summary": (ARRAY,)},
    "compaction": {"id": (STRING,), "encrypted_content": (STRING,)},
}
ITEM_STATUSES = {"in_progress", "completed", "incomplete"}
STATUSES = {"queued", "in_progress", "completed", "failed", "incomplete", "cancelled"}
TERMINAL_EVENTS = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}
# The streaming events this server sends, and what each carries besides type and sequence_number.
EVENT_FIELDS = {
    "response.created": {"response": (OBJECT,)},
    "response.in_progress": {"response": (OBJECT,)},
    "response.completed": {"response": (OBJECT,)},
    "response.incomplete": {"response": (OBJECT,)},
    "response.failed": {"response": (OBJECT,)},
    "response.output_item.added": {"output_index": (INTEGER,), "item": (OBJECT,)},
    "response.output_item.done": {"output_index": (INTEGER,), "item": (OBJECT,)},
    "response.content_part.added": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "content_index": (INTEGER,),
        "part": (OBJECT,),
    },
    "response.content_part.done": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "content_index": (INTEGER,),
        "part": (OBJECT,),
    },
    "response.output_text.delta": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "content_index": (INTEGER,),
        "delta": (STRING,),
    },
    "response.output_text.done": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "content_index": (INTEGER,),
        "text": (STRING,),
    },
    "response.reasoning.delta": {"item_id": (STRING,), "output_index": (INTEGER,), "delta": (STRING,)},
    "response.reasoning_text.delta": {"item_id": (STRING,), "output_index": (INTEGER,), "delta": (STRING,)},
    "response.reasoning_text.done": {"item_id": (STRING,), "output_index": (INTEGER,), "text": (STRING,)},
    "response.function_call_arguments.delta": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "delta": (STRING,),
    },
    "response.function_call_arguments.done": {
        "item_id": (STRING,),
        "output_index": (INTEGER,),
        "arguments": (STRING,),
    },
    "error": {"error": (OBJECT,)},
}


def _spec_events() -> dict[str, Any]:
    """The third-party models of the spec's streaming events, by the event type each names."""
    events = {}
    for name in dir(spec_types):
        model = getattr(spec_types, name)
        if name.endswith("StreamingEvent") and hasattr(model, "model_fields"):
            (kind,) = list(model.model_fields["type"].annotation)
            events[str(kind.value)] = model
    return events


SPEC_EVENTS = _spec_events()
ERROR_PAYLOAD_FIELDS = {
    "type": (STRING,),
    "code": (STRING, NULLABLE),
    "message": (STRING,),
    "param": (STRING, NULLABLE),
}


def fields(value: Any, wanted: dict[str, Any], where: str) -> list[str]:
    """Each wanted field present with one of its types (a bool is no number here)."""
    if not isinstance(value, dict):
        return [f"{where}: not an object"]
    problems = []
    for name, types in wanted.items():
        if name not in value:
            problems.append(f"{where}.{name}: missing")
            continue
        item = value[name]
        if isinstance(item, bool) and bool not in types:
            problems.append(f"{where}.{name}: {item!r} is a boolean")
        elif not isinstance(item, types):
            problems.append(f"{where}.{name}: {item!r} is not {' or '.join(t.__name__ for t in types)}")
    return problems


def item_problems(item: Any, where: str) -> list[str]:
    if not isinstance(item, dict) or item.get("type") not in ITEM_FIELDS:
        return [f"{where}: not a standard output item ({item!r:.80})"]
    problems = fields(item, ITEM_FIELDS[item["type"]], where)
    if "status" in item and item["status"] not in ITEM_STATUSES:
        problems.append(f"{where}.status: {item['status']!r}")
    for k, part in enumerate(item.get("content") or () if item["type"] == "message" else ()):
        if part.get("type") == "output_text":
            problems += fields(part, {"text": (STRING,), "annotations": (ARRAY,)}, f"{where}.content[{k}]")
    return problems


def response_problems(response: Any, where: str = "response") -> list[str]:
    """What a response object lacks, against the spec's ResponseResource; then the third-party
    models' verdict."""
    problems = fields(response, RESPONSE_FIELDS, where)
    if problems:
        return problems
    if response["object"] != "response":
        problems.append(f"{where}.object: {response['object']!r}, not 'response'")
    if response["status"] not in STATUSES:
        problems.append(f"{where}.status: {response['status']!r}")
    for k, tool in enumerate(response["tools"]):
        if isinstance(tool, dict) and tool.get("type") == "function":
            problems += fields(tool, FUNCTION_TOOL_FIELDS, f"{where}.tools[{k}]")
    for k, item in enumerate(response["output"]):
        problems += item_problems(item, f"{where}.output[{k}]")
    if response["usage"] is not None:
        problems += fields(response["usage"], USAGE_FIELDS, f"{where}.usage")
    if response["error"] is not None:
        problems += fields(response["error"], {"code": (STRING,), "message": (STRING,)}, f"{where}.error")
    return problems + parsed_by(spec_types.ResponseResource, response, where)


def event_problems(events: list[dict[str, Any]], where: str = "stream") -> list[str]:
    """A whole stream (SSE or WebSocket) of one response: each event's fields and response
    objects, sequence numbers 0, 1, 2... , created then in_progress first, one terminal event
    last whose status matches it."""
    problems = []
    for k, event in enumerate(events):
        at = f"{where}[{k}] {event.get('type')}"
        if event.get("sequence_number") != k:
            problems.append(f"{at}: sequence_number {event.get('sequence_number')!r}, not {k}")
        wanted = EVENT_FIELDS.get(event.get("type"))
        if wanted is None:
            problems.append(f"{at}: not an event of the spec")
            continue
        problems += fields(event, wanted, at)
        if "response" in event:
            problems += response_problems(event["response"], f"{at}.response")
        if "item" in event:
            problems += item_problems(event["item"], f"{at}.item")
        if event["type"] == "error":
            problems += fields(event.get("error"), ERROR_PAYLOAD_FIELDS, f"{at}.error")
        if event["type"] in SPEC_EVENTS:  # the reasoning_text events are OpenAI's names, not the spec's
            problems += parsed_by(SPEC_EVENTS[event["type"]], event, at)
    kinds = [event.get("type") for event in events]
    if kinds[:2] != ["response.created", "response.in_progress"]:
        problems.append(f"{where}: starts {kinds[:2]}, not response.created, response.in_progress")
    if not kinds or kinds[-1] not in TERMINAL_EVENTS:
        problems.append(f"{where}: ends with {kinds[-1:]}, not a terminal event")
    elif events[-1]["response"]["status"] != TERMINAL_EVENTS[kinds[-1]]:
        problems.append(f"{where}: {kinds[-1]} carries status {events[-1]['response']['status']!r}")
    return problems


def socket_error_problems(envelope: Any, where: str = "error") -> list[str]:
    """A WebSocket failure before a response began: the spec's WebSocketErrorEvent."""
    problems = fields(envelope, {"type": (STRING,), "status": (INTEGER,), "error": (OBJECT,)}, where)
    if not problems:
        problems += fields(envelope["error"], {"code": (STRING,), "message": (STRING,)}, f"{where}.error")
    return problems + parsed_by(spec_types.WebSocketErrorEvent, envelope, where)


def compaction_problems(compacted: Any, where: str = "compaction") -> list[str]:
    """A /v1/responses/compact answer: the spec's CompactResource, with a compaction item."""
    wanted = {"id": (STRING,), "object": (STRING,), "output": (ARRAY,), "created_at": (INTEGER,), "usage": (OBJECT,)}
    problems = fields(compacted, wanted, where)
    if problems:
        return problems
    if compacted["object"] != "response.compaction":
        problems.append(f"{where}.object: {compacted['object']!r}")
    for k, item in enumerate(compacted["output"]):
        problems += item_problems(item, f"{where}.output[{k}]")
    if not any(item.get("type") == "compaction" for item in compacted["output"]):
        problems.append(f"{where}.output: no compaction item")
    problems += fields(compacted["usage"], USAGE_FIELDS, f"{where}.usage")
    return problems + parsed_by(spec_types.CompactResource, compacted, where)


def parsed_by(model: Any, value: Any, where: str) -> list[str]:
    try:
        TypeAdapter(model).validate_python(value)
    except ValidationError as e:
        return [f"{where} (openresponses-types {model.__name__}): {err['loc']} {err['msg']}" for err in e.errors()]
    return []
