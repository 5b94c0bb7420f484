"""Context compaction, `POST /v1/responses/compact` (Open Responses 2026-04-24, OpenAI's
`responses.compact`): a long conversation becomes a shorter input window to start a new chain
from. As OpenAI defines the window: the conversation's user messages, verbatim and in order,
then one `compaction` item that stands for everything else (the assistant's answers, tool calls
and their outputs, reasoning), here a summary the model itself writes of the whole conversation.

The item's `encrypted_content` is opaque to clients, as the spec says; here it is encoded, not
encrypted: it carries the summary's text (`encode_summary`), which a later request's input turns
back into context (`decode_summary`: the system prompt's "summary of the earlier conversation").
Content this server did not write is a 400 naming the item.

Pure: no Ray, no MLX, no HTTP; the serving side is deployments/ingress/serving/responses.py.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import TYPE_CHECKING, Any, Optional

from deployments.protocol.errors import invalid_request

if TYPE_CHECKING:  # responses.py imports this module: its request type only for the annotation
    from deployments.protocol.responses import CompactRequest

# The summary's length: a window's compaction item is meant to be small next to what it replaces.
SUMMARY_MAX_TOKENS = 512
CONTENT_PREFIX = "ominix.compaction.v1:"
SUMMARY_PROMPT = (
    "You compact conversations. Write a concise summary of the conversation below for the assistant "
    "to continue it later: the user's goals and requests, facts and names given, decisions made, what "
    "the assistant answered, tool calls and their results, and open tasks. Write only the summary."
)
# How a summary reads in the system prompt of a request whose input holds a compaction item.
SUMMARY_HEADING = "Summary of the earlier conversation:"


def encode_summary(summary: str) -> str:
    payload = json.dumps({"summary": summary}, ensure_ascii=False).encode()
    return CONTENT_PREFIX + base64.urlsafe_b64encode(payload).decode()


def decode_summary(content: Any, where: str) -> str:
    """The summary a compaction item carries; content this server did not write is a 400."""
    if isinstance(content, str) and content.startswith(CONTENT_PREFIX):
        try:
            summary = json.loads(base64.urlsafe_b64decode(content[len(CONTENT_PREFIX) :]))["summary"]
        except (binascii.Error, ValueError, KeyError, TypeError):
            summary = None
        if isinstance(summary, str):
            return summary
    raise invalid_request(
        f"{where}.encrypted_content: not a compaction written by this server's /v1/responses/compact",
        "input",
        "invalid_encrypted_content",
    )


def compaction_item(item_id: str, summary: str) -> dict[str, Any]:
    return {"id": item_id, "type": "compaction", "encrypted_content": encode_summary(summary)}


def transcript(items: list[dict[str, Any]]) -> str:
    """Normalised items as the text the summariser reads, one line per turn."""
    lines = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            text = " ".join(p["text"] if "text" in p else "[image]" for p in item["content"])
            lines.append(f"{item['role'].capitalize()}: {text}")
        elif kind == "function_call":
            lines.append(f"Assistant called {item['name']}({item['arguments']})")
        elif kind == "function_call_output":
            lines.append(f"Tool result for {item['call_id']}: {item['output']}")
        elif kind == "compaction":
            lines.append(f"{SUMMARY_HEADING} {decode_summary(item['encrypted_content'], 'input')}")
        elif kind == "reasoning":
            continue  # the assistant's thinking: its answers say what came of it
    return "\n".join(lines)


def summary_chat_body(request: CompactRequest, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat request whose answer is the conversation's summary: deterministic (greedy), so
    compacting the same conversation twice gives the same window."""
    system = SUMMARY_PROMPT if not request.instructions else f"{SUMMARY_PROMPT}\n\n{request.instructions}"
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": transcript(items)}],
        "max_completion_tokens": SUMMARY_MAX_TOKENS,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.prompt_cache_key is not None:
        body["prompt_cache_key"] = request.prompt_cache_key
    return body


def compacted_window(items: list[dict[str, Any]], compaction: dict[str, Any]) -> list[dict[str, Any]]:
    """The new input window: the user messages as they were, then the compaction item."""
    return [item for item in items if item["type"] == "message" and item["role"] == "user"] + [compaction]


def compaction_object(
    compaction_id: str, output: list[dict[str, Any]], usage: Optional[dict[str, Any]]
) -> dict[str, Any]:
    """The response.compaction object (the spec's CompactResource)."""
    return {
        "id": compaction_id,
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage,
    }
