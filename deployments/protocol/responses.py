"""OpenAI's Responses API (POST /v1/responses) as a translation onto chat completions: the
request's items become chat messages (`chat_body`), and the chat generation's chunks become the
Responses output items, response object and stream events (`output_items`, `ResponseEvents`).
Pure: no Ray, no MLX, no HTTP; the serving side is deployments/ingress/serving/responses.py.

What an item becomes in chat:
- `instructions`: the first system message (never carried to a continued response);
- a message item (`{"role", "content"}`, with or without `type: "message"`): a message of that
  role; `input_text` / `output_text` parts are its text, `input_image` parts image parts (a
  vision model only, as in chat);
- `function_call` items: tool calls of one assistant message (with the assistant message right
  before them, if any); `function_call_output`: a tool message answering its `call_id`, which
  must name a call earlier in the conversation;
- `reasoning` items: the thinking of the next assistant message;
- `compaction` items (a window from /v1/responses/compact): their summary joins the system
  prompt, after the instructions (deployments/protocol/compaction.py).

Every field of OpenAI's request is served, ignored or refused by name (docs/api/responses.md);
an item or tool type nothing here serves is a 400 naming it.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from deployments.protocol.compaction import SUMMARY_HEADING, decode_summary
from deployments.protocol.errors import APIError, invalid_request, renamed
from deployments.protocol.generation import GenerationChunk, SamplingUsed
from deployments.protocol.logprobs import MAX_TOP_LOGPROBS, TokenLogprob
from deployments.protocol.openai import RefusingRequest, RequestModel, ToolCall, UsageInfo

MAX_METADATA_PAIRS, MAX_METADATA_KEY, MAX_METADATA_VALUE = 16, 64, 512

# Fields of OpenAI's request that would change what the answer must be and that nothing here
# can honour (docs/api/responses.md sorts every field).
REFUSED_RESPONSES_FIELDS = {
    "prompt": "stored prompt templates are not served here; send instructions and input",
    "context_management": "server-side context compaction is not served here",
    "max_tool_calls": "a cap on built-in tool calls is not served here (no built-in tools run here)",
    "moderation": "moderation is not served here",
    "access_programs": "access programs are not served here",
    "image": "image generation options are not served here; use /v1/images/generations",
}
# Tool types of OpenAI's own hosted tools: none runs here.
BUILT_IN_TOOLS = (
    "web_search",
    "web_search_preview",
    "file_search",
    "computer_use_preview",
    "computer",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "custom",
    "apply_patch",
    "namespace",
    "tool_search",
    "programmatic_tool_calling",
)
# include[] asking for the answer's log-probabilities; the other values name data (hosted tools'
# results, encrypted reasoning) nothing here has.
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


# ---------------------------------------------------------------------------------------------
# Requests


class TextFormat(RequestModel):
    type: Literal["text", "json_object", "json_schema"]
    name: Optional[str] = Field(None, max_length=64)
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    description: Optional[str] = None
    strict: Optional[bool] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and (self.schema_ is None or not self.name):
            raise ValueError("text.format: type json_schema needs `name` and `schema`, the JSON Schema to follow")
        return self


class TextConfig(RequestModel):
    format: Optional[TextFormat] = None
    verbosity: Optional[str] = None

    @field_validator("verbosity")
    @classmethod
    def _verbosity(cls, value):
        if value is not None:
            raise ValueError("text.verbosity: not served here; ask for it in the input or set max_output_tokens")
        return value


class ReasoningConfig(RequestModel):
    effort: Optional[str] = Field(None, max_length=32)
    summary: Optional[str] = None  # no summariser here: the reasoning items carry the whole thinking
    generate_summary: Optional[str] = None


class ConversationRequest(RefusingRequest):
    """What a request about a conversation has: its new items (`input`), after a stored
    response's conversation (`previous_response_id`); at least one of them."""

    input: Union[str, list[dict[str, Any]], None] = None
    previous_response_id: Optional[str] = Field(None, max_length=256)

    @model_validator(mode="after")
    def _has_a_conversation(self):
        if self.input is None and self.previous_response_id is None:
            raise ValueError("input: needed (a string or a list of items), or previous_response_id")
        if isinstance(self.input, str) and not self.input:
            raise ValueError("input: must not be empty")
        return self

    def input_items(self) -> list[dict[str, Any]]:
        if self.input is None:
            return []
        if isinstance(self.input, str):
            return [{"type": "message", "role": "user", "content": self.input}]
        return list(self.input)


class ResponsesRequest(ConversationRequest):
    model: Optional[str] = Field(None, description="Model id; the LLM slot's default when omitted")
    instructions: Optional[str] = None
    # A stored conversation (/v1/conversations) to answer and to append this turn to.
    conversation: Union[str, dict[str, Any], None] = None
    max_output_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: Optional[StrictBool] = None
    text: Optional[TextConfig] = None
    reasoning: Optional[ReasoningConfig] = None
    metadata: Optional[dict[str, str]] = None
    store: StrictBool = True
    stream: StrictBool = False
    # Generated by a task of the ingress; polled with GET, cancelled with POST .../cancel.
    background: StrictBool = False
    include: Optional[list[str]] = None
    top_logprobs: Optional[StrictInt] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    truncation: Optional[Literal["disabled", "auto"]] = None
    user: Optional[str] = None
    prompt_cache_key: Optional[str] = Field(None, max_length=1024)
    safety_identifier: Optional[str] = Field(None, max_length=64)  # echoed; nothing here monitors abuse
    service_tier: Optional[str] = None  # one tier here: answered as "default"

    refused_fields: ClassVar[dict[str, str]] = REFUSED_RESPONSES_FIELDS

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value):
        return check_metadata(value)

    @model_validator(mode="after")
    def _check(self):
        if self.background and self.stream:
            raise ValueError("stream: a background response is polled here (GET /v1/responses/{id}), not streamed")
        if self.background and not self.store:
            raise ValueError("store: a background response is stored (it is polled); send store: true")
        if self.conversation is not None:
            self.conversation_id()
            if self.previous_response_id is not None:
                raise ValueError("conversation: continue a conversation or a previous response, not both")
        return self

    def conversation_id(self) -> Optional[str]:
        """`conversation` as an id (it may come as `{"id": ...}`)."""
        value = self.conversation
        conversation_id = value.get("id") if isinstance(value, dict) else value
        if value is not None and (not isinstance(conversation_id, str) or not conversation_id):
            raise ValueError('conversation: a conversation id, or {"id": "<conversation id>"}')
        return conversation_id

    def wants_logprobs(self) -> bool:
        """The answer's log-probabilities, asked for by `include` (as OpenAI) or by `top_logprobs`."""
        return LOGPROBS_INCLUDE in (self.include or ()) or self.top_logprobs is not None

    def echo(self, sampling: Optional[SamplingUsed] = None) -> dict[str, Any]:
        """The request's settings as the response object repeats them, every field Open Responses
        requires present: the sampling values are those the generation ran with (`sampling`, as
        the slot reports it: the request's, else the model's defaults); without a report (the
        CUDA route) the request's, else OpenAI's defaults."""
        conversation_id = self.conversation_id()
        used = sampling or SamplingUsed(
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
        )
        return {
            "background": self.background,
            "conversation": {"id": conversation_id} if conversation_id else None,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "max_tool_calls": None,  # refused when sent: no built-in tools run here
            "metadata": self.metadata or {},
            "parallel_tool_calls": True if self.parallel_tool_calls is None else self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "prompt_cache_key": self.prompt_cache_key,
            "reasoning": {
                "effort": self.reasoning.effort if self.reasoning else None,
                "summary": self.reasoning.summary if self.reasoning else None,
            },
            "safety_identifier": self.safety_identifier,
            "service_tier": "default",
            "store": self.store,
            "temperature": used.temperature,
            "top_p": used.top_p,
            "presence_penalty": used.presence_penalty,
            "frequency_penalty": used.frequency_penalty,
            "text": {"format": self.text.format.model_dump(by_alias=True, exclude_none=True)}
            if self.text and self.text.format
            else {"format": {"type": "text"}},
            "tool_choice": self.tool_choice if self.tool_choice is not None else "auto",
            "tools": echoed_tools(self.tools),
            "top_logprobs": self.top_logprobs or 0,
            "truncation": self.truncation or "disabled",
            "user": self.user,
        }


def echoed_tools(tools: Optional[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Function tools as the response object lists them: every field of the spec's FunctionTool
    present (`description` and `parameters` null when not sent). `strict` is true unless the
    request said false: the LLM slot's constrained decoding holds a call's arguments to the
    schema either way (deployments/llm/constraints.py)."""
    echoed = []
    for tool in tools or ():
        if not isinstance(tool, dict) or tool.get("type") != "function":
            echoed.append(tool)  # refused before an answer: only a 400's request holds one
            continue
        echoed.append(
            {
                **tool,
                "description": tool.get("description"),
                "parameters": tool.get("parameters"),
                "strict": tool.get("strict") is not False,
            }
        )
    return echoed


class CompactRequest(ConversationRequest):
    """POST /v1/responses/compact (the spec's CompactResponseMethodPublicBody;
    deployments/protocol/compaction.py)."""

    model: StrictStr = Field(..., min_length=1, description="The model that writes the summary (required)")
    instructions: Optional[str] = None  # guidance for the summary: the summarising request's system prompt
    prompt_cache_key: Optional[str] = Field(None, max_length=1024)


# ---------------------------------------------------------------------------------------------
# Items: normalised (what is stored and listed), then as chat messages


def normalise_items(items: list[dict[str, Any]], field: str = "input") -> list[dict[str, Any]]:
    """The input items in their full shape, each with an id (as input_items lists them); an
    item or part nothing here serves is a 400 naming `field` (the request's list of them)."""
    try:
        return [_normalise(item, f"input[{i}]") for i, item in enumerate(items)]
    except APIError as e:
        raise renamed(e, {"input": field}) from None


def item_page(items: list[dict[str, Any]], after: Optional[str], limit: int, order: str, owner: str) -> dict:
    """One page of stored items as OpenAI lists them (`desc`: newest first; `after`: an item id
    of the previous page, a 400 when `owner` holds no such item)."""
    if order == "desc":
        items = items[::-1]
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise invalid_request(f"after: no item '{after}' in {owner}", "after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def check_metadata(value: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
    """OpenAI's metadata bounds: 16 pairs, keys of 64 characters, values of 512."""
    if value is None:
        return value
    if len(value) > MAX_METADATA_PAIRS:
        raise ValueError(f"at most {MAX_METADATA_PAIRS} key-value pairs")
    for key, item in value.items():
        if len(key) > MAX_METADATA_KEY or len(item) > MAX_METADATA_VALUE:
            raise ValueError(f"keys hold at most {MAX_METADATA_KEY} characters, values {MAX_METADATA_VALUE}")
    return value


def _normalise(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise invalid_request(f"{where}: an item is an object", "input")
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        return _message_item(item, where)
    if kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise invalid_request(f"{where}.{key}: a function_call item needs `{key}` (a string)", "input")
        return {"id": item.get("id") or new_id("fc"), **item, "type": "function_call", "status": "completed"}
    if kind == "function_call_output":
        output = item.get("output")
        if not isinstance(item.get("call_id"), str) or not item["call_id"]:
            raise invalid_request(f"{where}.call_id: a function_call_output needs the call_id it answers", "input")
        if isinstance(output, list):
            output = _text_of(output, f"{where}.output", ("input_text", "output_text"))
        if not isinstance(output, str):
            raise invalid_request(f"{where}.output: the function's output as a string", "input")
        return {
            "id": item.get("id") or new_id("fco"),
            "type": "function_call_output",
            "call_id": item["call_id"],
            "output": output,
            "status": "completed",
        }
    if kind == "reasoning":
        return {"id": item.get("id") or new_id("rs"), "summary": [], **item, "type": "reasoning"}
    if kind == "compaction":
        decode_summary(item.get("encrypted_content"), where)  # a 400 now, not when it is read
        return {
            "id": item.get("id") or new_id("cmp"),
            "type": "compaction",
            "encrypted_content": item["encrypted_content"],
        }
    if kind == "item_reference":
        raise invalid_request(f"{where}: item references are not served here; send the item itself", "input")
    raise invalid_request(
        f"{where}.type: '{kind}' items are not served here (messages, function_call, function_call_output, "
        "reasoning and compaction items are)",
        "input",
        "unsupported_item_type",
    )


def _message_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ("user", "system", "developer", "assistant"):
        raise invalid_request(
            f"{where}.role: '{role}' is not a message role (user, assistant, system or developer)", "input"
        )
    content = item.get("content")
    text_type = "output_text" if role == "assistant" else "input_text"
    if isinstance(content, str):
        parts = [{"type": text_type, "text": content}]
        if role == "assistant":
            parts[0]["annotations"] = []
    elif isinstance(content, list) and content:
        parts = [_part(part, f"{where}.content[{j}]", role) for j, part in enumerate(content)]
    else:
        raise invalid_request(f"{where}.content: a string or a list of content parts", "input")
    status = item.get("status", "completed")
    message = {
        "id": item.get("id") or new_id("msg"),
        "type": "message",
        "role": role,
        "content": parts,
        "status": status,
    }
    phase = item.get("phase")
    if phase is not None:
        # A label kept with the item (stored, listed, continued); the chat template has no use for it.
        if role != "assistant" or phase not in ("commentary", "final_answer"):
            raise invalid_request(f"{where}.phase: an assistant message's phase is commentary or final_answer", "input")
        message["phase"] = phase
    return message


def _part(part: Any, where: str, role: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text", "text", "refusal"):
        text = part.get("text", part.get("refusal"))
        if not isinstance(text, str):
            raise invalid_request(f"{where}.text: a string", "input")
        if role == "assistant":
            return {"type": "output_text", "text": text, "annotations": part.get("annotations") or []}
        return {"type": "input_text", "text": text}
    if kind == "input_image" and role != "assistant":
        if part.get("file_id") or not isinstance(part.get("image_url"), str):
            raise invalid_request(
                f"{where}: an input_image needs image_url (a data:image/...;base64 URL); file ids are not served",
                "input",
            )
        return {"type": "input_image", "image_url": part["image_url"], "detail": part.get("detail") or "auto"}
    raise invalid_request(
        f"{where}.type: '{kind}' content is not served here (input_text, input_image and output_text are)",
        "input",
        "unsupported_content_type",
    )


def _text_of(parts: list[Any], where: str, kinds: tuple[str, ...]) -> str:
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") not in kinds or not isinstance(part.get("text"), str):
            raise invalid_request(f"{where}: only text parts are served here", "input")
        texts.append(part["text"])
    return "".join(texts)


def chat_messages(items: list[dict[str, Any]], instructions: Optional[str]) -> list[dict[str, Any]]:
    """Normalised items (history first) as chat messages; a function_call_output whose call_id
    names no earlier call is a 400."""
    messages: list[dict[str, Any]] = []
    summaries = [
        f"{SUMMARY_HEADING} {decode_summary(item['encrypted_content'], 'input')}"
        for item in items
        if item["type"] == "compaction"
    ]
    # One system message: some chat templates refuse a second one, or one after the first turn.
    system = "\n\n".join([instructions] * bool(instructions) + summaries)
    if system:
        messages.append({"role": "system", "content": system})
    calls: set[str] = set()
    thinking: list[str] = []
    assistant: Optional[dict[str, Any]] = None  # the assistant turn being built (text, calls)
    for item in items:
        kind = item["type"]
        if kind == "compaction":
            continue  # in the system prompt above
        if kind == "reasoning":
            thinking.append(_reasoning_text(item))
            continue
        if kind == "function_call" or (kind == "message" and item["role"] == "assistant"):
            if assistant is None or (kind == "message" and (assistant.get("tool_calls") or assistant["content"])):
                assistant = {"role": "assistant", "content": ""}
                messages.append(assistant)
            if thinking:
                assistant["reasoning_content"] = "".join(thinking)
                thinking = []
            if kind == "message":
                assistant["content"] += "".join(p["text"] for p in item["content"])
            else:
                calls.add(item["call_id"])
                call = {"id": item["call_id"], "type": "function"}
                call["function"] = {"name": item["name"], "arguments": item["arguments"]}
                assistant.setdefault("tool_calls", []).append(call)
            continue
        assistant = None
        if kind == "function_call_output":
            if item["call_id"] not in calls:
                raise invalid_request(
                    f"input: function_call_output for call_id '{item['call_id']}' answers no function_call "
                    "earlier in the conversation",
                    "input",
                    "unknown_call_id",
                )
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            messages.append({"role": item["role"], "content": _chat_content(item["content"])})
    if not any(m["role"] != "system" for m in messages):
        raise invalid_request("input: the conversation has no message to answer", "input")
    return messages


def _reasoning_text(item: dict[str, Any]) -> str:
    parts = item.get("content") or item.get("summary") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _chat_content(parts: list[dict[str, Any]]) -> Union[str, list[dict[str, Any]]]:
    """Text only: one string (what every route, the CUDA one too, takes); with images: parts."""
    if all(p["type"] != "input_image" for p in parts):
        return "".join(p["text"] for p in parts)
    return [
        {"type": "image_url", "image_url": {"url": p["image_url"]}}
        if p["type"] == "input_image"
        else {"type": "text", "text": p["text"]}
        for p in parts
    ]


# ---------------------------------------------------------------------------------------------
# The chat request


def chat_tools(tools: Optional[list[dict[str, Any]]]) -> Optional[list[dict[str, Any]]]:
    """Function tools in chat's shape; a built-in tool type is a 400 naming it."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            raise invalid_request(
                f"tools[{i}].type: '{kind}' tools are not served here (no built-in tools run in this graph); "
                "only function tools are",
                f"tools[{i}].type",
                "unsupported_tool_type",
            )
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise invalid_request(f"tools[{i}].name: a function tool needs a name", f"tools[{i}].name")
        function = {"name": tool["name"]}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Union[str, dict[str, Any], None], tools: Optional[list[dict]]) -> Any:
    if choice is None or isinstance(choice, str):
        if choice not in (None, "none", "auto", "required"):
            raise invalid_request("tool_choice: one of none, auto, required, or a function", "tool_choice")
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
        raise invalid_request(
            f"tool_choice: '{choice.get('type')}' is not served here; name a function tool "
            '({"type": "function", "name": ...}) or use none, auto, required',
            "tool_choice",
        )
    if choice["name"] not in {t["name"] for t in tools or () if isinstance(t, dict) and "name" in t}:
        raise invalid_request(f"tool_choice: '{choice['name']}' is not among the function tools", "tool_choice")
    return {"type": "function", "function": {"name": choice["name"]}}


def chat_response_format(text: Optional[TextConfig]) -> Optional[dict[str, Any]]:
    fmt = text.format if text else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    schema = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.description is not None:
        schema["description"] = fmt.description
    if fmt.strict is not None:
        schema["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": schema}


def _is_message(item: dict[str, Any], *roles: str) -> bool:
    return item.get("type") == "message" and item.get("role") in roles


def user_turns(items: list[dict[str, Any]]) -> int:
    return sum(1 for item in items if _is_message(item, "user"))


def from_turn(items: list[dict[str, Any]], first_turn: int) -> list[dict[str, Any]]:
    """`truncation: "auto"`: the conversation from its `first_turn`-th user message on, the
    earlier turns (with their calls and outputs) left out; system and developer messages and
    compaction items (already short) are always kept. 0, or past the last user message: all of it."""
    users = [k for k, item in enumerate(items) if _is_message(item, "user")]
    if not 0 < first_turn < len(users):
        return items
    start = users[first_turn]
    kept = [
        item
        for k, item in enumerate(items)
        if k >= start or _is_message(item, "system", "developer") or item["type"] == "compaction"
    ]
    calls = {item["call_id"] for item in kept if item["type"] == "function_call"}
    return [item for item in kept if item["type"] != "function_call_output" or item["call_id"] in calls]


def chat_body(request: ResponsesRequest, items: list[dict[str, Any]], stream: bool = True) -> dict[str, Any]:
    """The chat completion request that answers this Responses request, `items` being the whole
    conversation (a continued response's first)."""
    body: dict[str, Any] = {"messages": chat_messages(items, request.instructions), "stream": stream}
    fields = {
        "model": request.model,
        "max_completion_tokens": request.max_output_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "presence_penalty": request.presence_penalty,
        "frequency_penalty": request.frequency_penalty,
        "tools": chat_tools(request.tools),
        "tool_choice": chat_tool_choice(request.tool_choice, request.tools),
        "parallel_tool_calls": request.parallel_tool_calls,
        "response_format": chat_response_format(request.text),
        "reasoning_effort": request.reasoning.effort if request.reasoning else None,
        "user": request.user,
        "prompt_cache_key": request.prompt_cache_key,
    }
    body.update({k: v for k, v in fields.items() if v is not None})
    if request.wants_logprobs():
        body.update(logprobs=True, top_logprobs=request.top_logprobs or 0)
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


# Chat's field names in an error, as this protocol names them.
CHAT_TO_RESPONSES_PARAMS = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
    "logprobs": "include",
}


# ---------------------------------------------------------------------------------------------
# Output


def usage_object(usage: Optional[UsageInfo]) -> Optional[dict[str, Any]]:
    if usage is None:
        return None
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},  # not counted apart here
        "total_tokens": usage.total_tokens,
    }


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}] if text else [],
        "status": status,
    }


def message_item(
    item_id: str, text: Optional[str], status: str = "completed", logprobs: Optional[list[TokenLogprob]] = None
) -> dict[str, Any]:
    content = [] if text is None else [output_text(text, logprobs)]
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def output_text(text: str, logprobs: Optional[list[TokenLogprob]] = None) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprob_dicts(logprobs)}


def logprob_dicts(entries: Optional[list[TokenLogprob]]) -> list[dict[str, Any]]:
    """Chat's token entries in the Responses shape (the same fields: token, logprob, bytes,
    top_logprobs)."""
    return [entry.model_dump() for entry in entries or ()]


def function_call_item(item_id: str, call: ToolCall, arguments: Optional[str] = None, status="completed") -> dict:
    return {
        "id": item_id,
        "type": "function_call",
        "call_id": call.id,
        "name": call.function.name,
        "arguments": call.function.arguments if arguments is None else arguments,
        "status": status,
    }


def output_items(total: GenerationChunk, logprobs: Optional[list[TokenLogprob]] = None) -> list[dict[str, Any]]:
    """A whole generation as output items: its thinking, its answer (with the log-probabilities
    of its tokens, when asked for), its tool calls."""
    items = []
    if total.reasoning_content:
        items.append(reasoning_item(new_id("rs"), total.reasoning_content))
    if total.content or not total.tool_calls:
        status = finish_status(total.finish_reason)[0]
        items.append(message_item(new_id("msg"), total.content, status, logprobs))
    items += [function_call_item(new_id("fc"), call) for call in total.tool_calls]
    return items


def finish_status(finish_reason: Optional[str]) -> tuple[str, Optional[dict[str, str]]]:
    """The response's status and incomplete_details for the generation's finish reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason in ("content_filter", "schema_not_met"):
        return "incomplete", {"reason": finish_reason}
    return "completed", None


def response_object(
    response_id: str,
    created_at: int,
    model: str,
    request: ResponsesRequest,
    status: str = "in_progress",
    output: Optional[list[dict[str, Any]]] = None,
    usage: Optional[UsageInfo] = None,
    incomplete_details: Optional[dict[str, str]] = None,
    error: Optional[dict[str, str]] = None,
    sampling: Optional[SamplingUsed] = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": incomplete_details,
        "model": model,
        "output": output or [],
        "usage": usage_object(usage),
        "completed_at": int(time.time()) if status == "completed" else None,
        **request.echo(sampling),
    }


def output_text_of(output: list[dict[str, Any]]) -> str:
    return "".join(
        part.get("text", "")
        for item in output
        if item.get("type") == "message"
        for part in item.get("content", [])
        if part.get("type") == "output_text"
    )


# ---------------------------------------------------------------------------------------------
# Streaming


class ResponseEvents:
    """The stream events of one response, in the order the openai SDK's stream state expects:
    created and in_progress; then per output item its `output_item.added`, its content
    (`content_part.added`, text deltas, `output_text.done`, `content_part.done` for a message;
    reasoning text deltas for a reasoning item; the arguments' delta and done for a function
    call) and its `output_item.done`; then completed (incomplete at the token limit), or failed.
    Every event carries its sequence_number. Pure: fed GenerationChunks, returns event dicts."""

    def __init__(self, response: dict[str, Any]):
        self.response = response  # the in-progress object; completed in place at the end
        self.output: list[dict[str, Any]] = []
        self.sequence = 0
        self._open: Optional[dict[str, Any]] = None  # the item whose content is arriving
        self._text = ""
        self._logprobs: list[TokenLogprob] = []  # the open message's token entries

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.response))

    def start(self) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def feed(self, chunk: GenerationChunk) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if chunk.reasoning_content:
            events += self._delta("reasoning", chunk.reasoning_content)
        if chunk.content:
            events += self._delta("message", chunk.content, chunk.logprobs or [])
        for call in chunk.tool_calls:
            events += self._close()
            item = function_call_item(new_id("fc"), call, arguments="", status="in_progress")
            index = self._add(item, events)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=call.function.arguments,
                )
            )
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=call.function.arguments,
                )
            )
            item.update(arguments=call.function.arguments, status="completed")
            events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def progress(self) -> dict[str, Any]:
        """The response as it stands mid-stream: the items so far, the one being written with
        its text so far (what a background response shows while it runs)."""
        output = json.loads(json.dumps(self.output))
        if self._open is not None and output:
            kind = self._open["type"]
            part = output_text(self._text) if kind == "message" else {"type": "reasoning_text", "text": self._text}
            output[-1]["content"] = [part]
        return {**self._snapshot(), "output": output}

    def _add(self, item: dict[str, Any], events: list[dict[str, Any]]) -> int:
        index = len(self.output)
        self.output.append(item)
        events.append(self._event("response.output_item.added", output_index=index, item=json.loads(json.dumps(item))))
        return index

    def _delta(self, kind: str, text: str, logprobs: Optional[list[TokenLogprob]] = None) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != kind:
            events += self._close()
            if kind == "message":
                item = message_item(new_id("msg"), None, "in_progress")
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            else:
                item = reasoning_item(new_id("rs"), "", "in_progress")
                part = {"type": "reasoning_text", "text": ""}
            index = self._add(item, events)
            events.append(
                self._event(
                    "response.content_part.added", item_id=item["id"], output_index=index, content_index=0, part=part
                )
            )
            self._open, self._text, self._logprobs = item, "", []
        self._text += text
        self._logprobs += logprobs or []
        kind_event = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        extra = {"logprobs": logprob_dicts(logprobs)} if kind == "message" else {}
        item = self._open
        events.append(
            self._event(
                kind_event, item_id=item["id"], output_index=len(self.output) - 1, content_index=0, delta=text, **extra
            )
        )
        return events

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        item, text = self._open, self._text
        if item is None:
            return []
        self._open, self._text = None, ""
        index = len(self.output) - 1
        ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
        if item["type"] == "message":
            part = output_text(text, self._logprobs)
            done = [
                self._event("response.output_text.done", **ids, text=text, logprobs=part["logprobs"]),
                self._event("response.content_part.done", **ids, part=part),
            ]
            item.update(content=[part], status=status)
        else:
            part = {"type": "reasoning_text", "text": text}
            done = [
                self._event("response.reasoning_text.done", **ids, text=text),
                self._event("response.content_part.done", **ids, part=part),
            ]
            item.update(content=[part], status="completed")
        done.append(self._event("response.output_item.done", output_index=index, item=json.loads(json.dumps(item))))
        return done

    def finish(self, finish_reason: Optional[str], usage: Optional[UsageInfo]) -> list[dict[str, Any]]:
        status, incomplete = finish_status(finish_reason)
        events = self._close(finish_status(finish_reason)[0])
        if not self.output:  # nothing was said: an empty answer, as a non-streamed response has
            item = message_item(new_id("msg"), None, "in_progress")
            index = self._add(item, events)
            item.update(content=[output_text("")], status="completed")
            events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        self.response.update(
            status=status,
            output=self.output,
            usage=usage_object(usage),
            incomplete_details=incomplete,
            completed_at=int(time.time()) if status == "completed" else None,
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, response=self._snapshot()))
        return events

    def fail(self, error: APIError) -> list[dict[str, Any]]:
        """A fault after the stream began: an `error` event, then `response.failed`."""
        self._open = None
        self.response.update(
            status="failed", output=self.output, error={"code": failure_code(error), "message": error.message}
        )
        return [
            self._event("error", **error_event_fields(error)),
            self._event("response.failed", response=self._snapshot()),
        ]


def error_event_fields(error: APIError) -> dict[str, Any]:
    """An `error` event's fields: OpenAI's (code, message, param at the top, what the openai SDK
    reads) and Open Responses' (the same under `error`, with its type)."""
    code = error.code or error.type
    nested = {"type": error.type, "code": code, "message": error.message, "param": error.param}
    return {"code": code, "message": error.message, "param": error.param, "error": nested}


def response_not_found(response_id: str, param: Optional[str] = None) -> APIError:
    code = "previous_response_not_found" if param == "previous_response_id" else "response_not_found"
    what = "Previous response" if param == "previous_response_id" else "Response"
    return APIError(404, f"{what} with id '{response_id}' not found.", "invalid_request_error", param, code)


def failure_code(error: APIError) -> str:
    """A failed response's `error.code`, from the few OpenAI defines."""
    if error.status_code == 429:
        return "rate_limit_exceeded"
    return "server_error" if error.status_code >= 500 else "invalid_prompt"


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True
