"""Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) as a translation
onto chat completions: the request's blocks become chat messages (`chat_body`), the chat
generation's chunks become a Message and its stream events (`message_object`, `MessageEvents`).
Pure: no Ray, no MLX, no HTTP; the serving side is deployments/ingress/serving/messages.py.

What a block becomes in chat:
- `system` (a string or text blocks): the first system message;
- a user message's `text` and `image` blocks: its content (images: a vision model only, as in
  chat); its `tool_result` blocks: tool messages, before its other content, each answering a
  `tool_use` id earlier in the conversation;
- an assistant message's `text`: its content; `tool_use` blocks: its tool calls (`input` as the
  JSON arguments); `thinking`: its reasoning.

Errors on these routes are Anthropic's shape (`anthropic_error_body`). Every field of the
`anthropic` SDK's request is served, ignored or refused by name (docs/api/messages.md).
"""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar, Optional, Union

from pydantic import Field, StrictBool, model_validator

from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.generation import GenerationChunk
from deployments.protocol.openai import RefusingRequest, ToolCall, UsageInfo

MIN_THINKING_BUDGET = 1024  # Anthropic's minimum budget_tokens

REFUSED_MESSAGES_FIELDS = {
    "container": "code-execution containers are not served here",
    "mcp_servers": "remote MCP servers are not served here; give the model function tools",
    "context_management": "server-side context management is not served here",
}

# HTTP status -> Anthropic's error type.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def anthropic_error_type(status_code: int) -> str:
    return ERROR_TYPES.get(status_code, "api_error" if status_code >= 500 else "invalid_request_error")


def anthropic_error_body(error: APIError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}`, the type by the HTTP status."""
    return {"type": "error", "error": {"type": anthropic_error_type(error.status_code), "message": error.message}}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def tool_use_id(call_id: str) -> str:
    """A chat tool call's id as Anthropic names them (`toolu_…`); a tool_result names it back."""
    return "toolu_" + call_id.removeprefix("call_") if call_id.startswith("call_") else call_id


# ---------------------------------------------------------------------------------------------
# Requests


class CountTokensRequest(RefusingRequest):
    """POST /v1/messages/count_tokens: what a message request would send, without a limit."""

    model: str = Field(..., min_length=1, description="Model id")
    messages: list[dict[str, Any]] = Field(..., min_length=1)
    system: Union[str, list[dict[str, Any]], None] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[dict[str, Any]] = None
    thinking: Optional[dict[str, Any]] = None
    output_config: Optional[dict[str, Any]] = None

    refused_fields: ClassVar[dict[str, str]] = REFUSED_MESSAGES_FIELDS


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(..., ge=1)
    stop_sequences: Optional[list[str]] = None
    # Not in the SDK's current request type, still sent by older clients: honoured.
    temperature: Optional[float] = Field(None, ge=0.0, le=1.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=0)
    metadata: Optional[dict[str, Any]] = None
    stream: StrictBool = False

    @model_validator(mode="after")
    def _thinking_budget(self):
        budget = (self.thinking or {}).get("budget_tokens")
        if (self.thinking or {}).get("type") == "enabled":
            if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
                raise ValueError(f"thinking.budget_tokens: at least {MIN_THINKING_BUDGET}")
            if budget >= self.max_tokens:
                raise ValueError("thinking.budget_tokens: must be less than max_tokens")
        return self


# ---------------------------------------------------------------------------------------------
# Blocks as chat messages


def chat_messages(request: CountTokensRequest) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = _system_text(request.system)
    if system:
        messages.append({"role": "system", "content": system})
    tool_uses: set[str] = set()
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise invalid_request(
                f"{where}.role: '{role}' is not a message role here (user or assistant; the system prompt "
                "goes in `system`)",
                "messages",
            )
        blocks = _blocks(message.get("content"), where)
        if role == "assistant":
            messages.append(_assistant(blocks, where, tool_uses))
        else:
            messages += _user(blocks, where, tool_uses)
    if request.messages[-1].get("role") == "assistant":
        raise invalid_request(
            "messages: a final assistant message (a prefill to continue) is not served here; end with a user message",
            "messages",
        )
    return messages


def _system_text(system: Union[str, list[dict[str, Any]], None]) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    texts = []
    for j, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise invalid_request(f"system[{j}]: the system prompt takes text blocks", "system")
        texts.append(block["text"])
    return "\n\n".join(texts)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content or not all(isinstance(b, dict) for b in content):
        raise invalid_request(f"{where}.content: a string or a list of content blocks", "messages")
    return content


def _assistant(blocks: list[dict[str, Any]], where: str, tool_uses: set[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            message["content"] += _string(block, "text", f"{where}.content[{j}]")
        elif kind == "thinking":
            message["reasoning_content"] = message.get("reasoning_content", "") + _string(
                block, "thinking", f"{where}.content[{j}]"
            )
        elif kind == "redacted_thinking":
            continue  # encrypted elsewhere: nothing a model here can read
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise invalid_request(f"{where}.content[{j}]: a tool_use block needs id and name", "messages")
            tool_uses.add(block["id"])
            call = {"name": block["name"], "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False)}
            message.setdefault("tool_calls", []).append({"id": block["id"], "type": "function", "function": call})
        else:
            raise _unserved_block(kind, f"{where}.content[{j}]")
    return message


def _user(blocks: list[dict[str, Any]], where: str, tool_uses: set[str]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        kind, at = block.get("type"), f"{where}.content[{j}]"
        if kind == "text":
            parts.append({"type": "text", "text": _string(block, "text", at)})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block, at)}})
        elif kind == "tool_result":
            results.append(_tool_result(block, at, tool_uses))
        else:
            raise _unserved_block(kind, at)
    if not parts:
        return results
    if all(p["type"] == "text" for p in parts):
        return [*results, {"role": "user", "content": "".join(p["text"] for p in parts)}]
    return [*results, {"role": "user", "content": parts}]


def _tool_result(block: dict[str, Any], at: str, tool_uses: set[str]) -> dict[str, Any]:
    use_id = block.get("tool_use_id")
    if use_id not in tool_uses:
        raise invalid_request(
            f"{at}.tool_use_id: '{use_id}' answers no tool_use block earlier in the conversation",
            "messages",
            "unknown_tool_use_id",
        )
    content = block.get("content", "")
    if isinstance(content, list):
        texts = []
        for block_in in content:
            if not isinstance(block_in, dict) or block_in.get("type") != "text":
                raise invalid_request(f"{at}.content: a tool result is text here", "messages")
            texts.append(_string(block_in, "text", at))
        content = "".join(texts)
    if not isinstance(content, str):
        raise invalid_request(f"{at}.content: a string or text blocks", "messages")
    if block.get("is_error"):
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": use_id, "content": content}


def _image_url(block: dict[str, Any], at: str) -> str:
    source = block.get("source") or {}
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
    if source.get("type") == "url" and isinstance(source.get("url"), str):
        return source["url"]
    raise invalid_request(f"{at}.source: a base64 or url image source", "messages")


def _string(block: dict[str, Any], key: str, at: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise invalid_request(f"{at}.{key}: a string", "messages")
    return value


def _unserved_block(kind: Any, at: str) -> APIError:
    return invalid_request(
        f"{at}.type: '{kind}' blocks are not served here (text, image, tool_use, tool_result and thinking are)",
        "messages",
        "unsupported_content_type",
    )


def chat_tools(tools: Optional[list[dict[str, Any]]]) -> Optional[list[dict[str, Any]]]:
    """Client tools in chat's shape; a server tool type (web search, bash, ...) is a 400 naming it."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else "?"
        if kind not in (None, "custom"):
            raise invalid_request(
                f"tools[{i}].type: '{kind}' tools are not served here (no server tools run in this graph); "
                "only client tools with an input_schema are",
                f"tools.{i}.type",
                "unsupported_tool_type",
            )
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
            raise invalid_request(f"tools[{i}]: a tool needs a name and an input_schema", f"tools.{i}")
        function = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description"):
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Optional[dict[str, Any]], tools: Optional[list[dict]]) -> tuple[Any, Optional[bool]]:
    """(chat's tool_choice, parallel_tool_calls) for Anthropic's tool_choice."""
    if choice is None:
        return None, None
    kind = choice.get("type")
    parallel = None if choice.get("disable_parallel_tool_use") is None else not choice["disable_parallel_tool_use"]
    if kind == "auto":
        return "auto", parallel
    if kind == "any":
        return "required", parallel
    if kind == "none":
        return "none", None
    if kind == "tool":
        name = choice.get("name")
        if name not in {t.get("name") for t in tools or () if isinstance(t, dict)}:
            raise invalid_request(f"tool_choice.name: '{name}' is not among the tools", "tool_choice")
        return {"type": "function", "function": {"name": name}}, parallel
    raise invalid_request(f"tool_choice.type: '{kind}' (auto, any, tool or none)", "tool_choice")


def chat_body(request: CountTokensRequest, stream: bool = True) -> dict[str, Any]:
    """The chat completion request that answers this Messages request (count_tokens: the same
    conversation, to count)."""
    tool_choice, parallel = chat_tool_choice(request.tool_choice, request.tools)
    output = request.output_config or {}
    fmt = output.get("format")
    thinking = (request.thinking or {}).get("type")
    fields: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request),
        "tools": chat_tools(request.tools),
        "tool_choice": tool_choice,
        "parallel_tool_calls": parallel,
        "reasoning_effort": output.get("effort"),
        # enabled / disabled switch the template's thinking; adaptive leaves it to the model.
        "chat_template_kwargs": {"enable_thinking": thinking == "enabled"}
        if thinking in ("enabled", "disabled")
        else None,
        "response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt.get("schema")}}
        if isinstance(fmt, dict)
        else None,
    }
    if isinstance(request, MessagesRequest):
        fields.update(
            max_tokens=request.max_tokens,
            stop=request.stop_sequences or None,
            temperature=request.temperature,
            top_p=request.top_p,
            top_k=request.top_k,
            user=(request.metadata or {}).get("user_id"),
            stream=stream,
            stream_options={"include_usage": True} if stream else None,
        )
    return {k: v for k, v in fields.items() if v is not None}


# Chat's field names in an error, as this protocol names them.
CHAT_TO_MESSAGES_PARAMS = {
    "max_completion_tokens": "max_tokens",
    "stop": "stop_sequences",
    "response_format": "output_config.format",
    "reasoning_effort": "output_config.effort",
    "chat_template_kwargs": "thinking",
}


# ---------------------------------------------------------------------------------------------
# The answer


def stop_reason(finish_reason: Optional[str], stop_sequence: Optional[str]) -> Optional[str]:
    if finish_reason == "length":
        return "max_tokens"
    if finish_reason == "tool_calls":
        return "tool_use"
    if finish_reason == "stop":
        return "stop_sequence" if stop_sequence else "end_turn"
    if finish_reason in ("content_filter", "schema_not_met"):
        # Anthropic's structured outputs: with "refusal" the output may not match the schema.
        return "refusal"
    return None


def usage_object(usage: Optional[UsageInfo]) -> dict[str, int]:
    """Anthropic counts the prompt tokens read from the cache apart from `input_tokens`."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return {
        "input_tokens": usage.prompt_tokens - cached,
        "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


def tool_input(call: ToolCall) -> Optional[dict[str, Any]]:
    """A call's arguments as the tool_use block's `input` (an object); None when they are not one."""
    try:
        value = json.loads(call.function.arguments or "{}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def content_blocks(total: GenerationChunk) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if total.reasoning_content:
        blocks.append({"type": "thinking", "thinking": total.reasoning_content, "signature": ""})
    calls = []
    text = total.content
    for call in total.tool_calls:
        value = tool_input(call)
        if value is None:  # arguments that are no JSON object: said as text, never dropped
            text += call.function.arguments
        else:
            calls.append({"type": "tool_use", "id": tool_use_id(call.id), "name": call.function.name, "input": value})
    if text or not calls:
        blocks.append({"type": "text", "text": text})
    return blocks + calls


def message_object(
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    finish_reason: Optional[str] = None,
    stop_sequence: Optional[str] = None,
    usage: Optional[UsageInfo] = None,
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(finish_reason, stop_sequence),
        "stop_sequence": stop_sequence,
        "usage": usage_object(usage),
    }


class MessageEvents:
    """A message's stream events, in the order the anthropic SDK's stream accumulator expects:
        message_start and a ping; per content block its content_block_start, deltas (text_delta,
        thinking_delta, input_json_delta) and content_block_stop; then message_delta (stop_reason,
        stop_sequence, the usage: the prompt's tokens apart from those read from the prefix cache,
    known only at the end) and message_stop.
        Pure: fed GenerationChunks, returns event dicts."""

    def __init__(self, message_id: str, model: str):
        self.message_id, self.model = message_id, model
        self.index = -1
        self._open: Optional[str] = None  # the type of the block whose deltas are arriving

    def start(self, prompt_tokens: Optional[int] = None) -> list[dict[str, Any]]:
        """`prompt_tokens`: the prompt's length as the LLM slot counted it (message_start's
        `input_tokens`; 0 where the slot does not say: the VLM, the CUDA route)."""
        message = message_object(self.message_id, self.model, [])
        message["usage"]["input_tokens"] = prompt_tokens or 0
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def feed(self, chunk: GenerationChunk) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if chunk.reasoning_content:
            events += self._delta("thinking", {"type": "thinking_delta", "thinking": chunk.reasoning_content})
        if chunk.content:
            events += self._delta("text", {"type": "text_delta", "text": chunk.content})
        for call in chunk.tool_calls:
            value = tool_input(call)
            if value is None:
                events += self._delta("text", {"type": "text_delta", "text": call.function.arguments})
                continue
            events += self._close()
            self.index += 1
            block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.function.name, "input": {}}
            events.append({"type": "content_block_start", "index": self.index, "content_block": block})
            partial = json.dumps(value, ensure_ascii=False)
            events.append(
                {
                    "type": "content_block_delta",
                    "index": self.index,
                    "delta": {"type": "input_json_delta", "partial_json": partial},
                }
            )
            events.append({"type": "content_block_stop", "index": self.index})
        return events

    def _delta(self, kind: str, delta: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open != kind:
            events += self._close()
            self.index += 1
            self._open = kind
            block = (
                {"type": "text", "text": ""}
                if kind == "text"
                else {"type": "thinking", "thinking": "", "signature": ""}
            )
            events.append({"type": "content_block_start", "index": self.index, "content_block": block})
        events.append({"type": "content_block_delta", "index": self.index, "delta": delta})
        return events

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        self._open = None
        return [{"type": "content_block_stop", "index": self.index}]

    def finish(
        self, finish_reason: Optional[str], stop_sequence: Optional[str], usage: Optional[UsageInfo]
    ) -> list[dict]:
        events = self._close()
        if self.index < 0:  # nothing was said: one empty text block, as a whole message has
            events += self._delta("text", {"type": "text_delta", "text": ""}) + self._close()
        delta = {"stop_reason": stop_reason(finish_reason, stop_sequence), "stop_sequence": stop_sequence}
        events.append({"type": "message_delta", "delta": delta, "usage": usage_object(usage)})
        events.append({"type": "message_stop"})
        return events

    @staticmethod
    def fail(error: APIError) -> list[dict[str, Any]]:
        return [anthropic_error_body(error)]
