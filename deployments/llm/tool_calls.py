"""Tool-call text (what the model wrote between tool-call markers) to OpenAI `tool_calls`.

The parsing of one call is mlx-lm's (`TokenizerWrapper.tool_parser`, chosen per model family
from the chat template); this module only shapes the result the way OpenAI clients expect.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any, Optional

from deployments.protocol.openai import FunctionCall, ToolCall

logger = logging.getLogger(__name__)

ToolParser = Callable[[str, Any], Any]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tool_calls(
    texts: list[str], parser: Optional[ToolParser], tools: Optional[list[dict[str, Any]]]
) -> tuple[list[ToolCall], list[str]]:
    """Parsed calls, and the texts that did not parse (returned so they are not lost)."""
    calls: list[ToolCall] = []
    failed: list[str] = []
    for text in texts:
        try:
            if parser is None:
                raise ValueError("this model has no tool-call parser")
            parsed = parser(text, tools)
            for item in parsed if isinstance(parsed, list) else [parsed]:
                calls.append(_to_tool_call(item))
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            logger.warning("Could not parse a tool call (%s): %r", e, text[:200])
            failed.append(text)
    return calls, failed


def _to_tool_call(item: dict[str, Any]) -> ToolCall:
    name = item["name"]
    arguments = item.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(id=item.get("id") or new_call_id(), function=FunctionCall(name=name, arguments=arguments))
