"""OpenAI request and response models for chat, text completions and the model list.

Requests tolerate unknown fields (clients send vendor extensions); values that are present are
validated so a bad request fails with a 400 naming the field, before any model work starts.
Every field of OpenAI's own request is served, ignored as meaningless here (listed in
docs/api/chat.md), or refused with a 400 that names it (`REFUSED_CHAT_FIELDS`): a field that
changes what the answer must be is never dropped in silence.
Responses serialize the way api.openai.com does: `finish_reason: null` is sent explicitly,
empty optional message fields are left out.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, ClassVar, Literal, Optional, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive
from deployments.protocol.logprobs import (
    MAX_COMPLETION_LOGPROBS,
    MAX_TOP_LOGPROBS,
    ChoiceLogprobs,
    CompletionLogprobs,
)

MAX_STOP_SEQUENCES = 16
COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
SEED_RANGE = (-(2**63), 2**64 - 1)  # int64 as OpenAI documents it, and the unsigned 64-bit keys MLX takes


def now() -> int:
    return int(time.time())


def random_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


class RequestModel(BaseModel):
    # strict: a field takes the JSON type /openapi.json publishes for it and no other (lax
    # pydantic served `"stream": 0` as false and `"max_tokens": "5"` as 5, which OpenAI refuses;
    # tests/ingress/test_schema_fuzz.py sends such values).
    model_config = ConfigDict(extra="allow", strict=True)


class RefusingRequest(RequestModel):
    """A request of an OpenAI-style protocol: a field it names in `refused_fields` (field -> why)
    is a 400 naming it when set, never a silent drop; fields no one defines stay accepted."""

    refused_fields: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _refuse_unserved(cls, data: Any) -> Any:
        if isinstance(data, dict):
            refuse_unserved(data, cls.refused_fields)
        return data


class OmitNoneModel(BaseModel):
    """Response parts whose unset (None) fields are left out of the JSON."""

    @model_serializer(mode="wrap")
    def _omit_none(self, handler):
        return {k: v for k, v in handler(self).items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Requests


class TextPart(RequestModel):
    type: Literal["text"]
    text: str


class ImagePart(RequestModel):
    type: Literal["image_url", "input_image", "image"]


ContentPart = Union[TextPart, ImagePart]


class ToolCallFunction(RequestModel):
    name: str
    arguments: Union[str, dict[str, Any]] = "{}"


class ToolCallIn(RequestModel):
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(RequestModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCallIn]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None

    @model_validator(mode="after")
    def _check_tool_result(self):
        # A tool result answers one call: without its id or its content the template would
        # render a turn the model was never shown (OpenAI requires both).
        if self.role == "tool":
            if self.content is None:
                raise ValueError("content: a tool message needs the tool's result as content")
            if not self.tool_call_id:
                raise ValueError("tool_call_id: a tool message needs the id of the call it answers")
        return self

    def has_image(self) -> bool:
        return isinstance(self.content, list) and any(isinstance(p, ImagePart) for p in self.content)

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    def for_template(self) -> dict[str, Any]:
        """The dict a Hugging Face chat template expects."""
        role = "system" if self.role == "developer" else self.role
        out: dict[str, Any] = {"role": role, "content": self.text()}
        if self.name:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        if self.reasoning_content:
            out["reasoning_content"] = self.reasoning_content
        return out


class FunctionDefinition(RequestModel):
    name: str
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class ToolDefinition(RequestModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class StreamOptions(RequestModel):
    include_usage: bool = False


class JSONSchemaFormat(RequestModel):
    """`response_format.json_schema`: the schema the answer must follow (deployments/llm/constraints.py)."""

    name: str = Field(..., max_length=64)
    description: Optional[str] = None
    # `schema` would shadow pydantic's BaseModel.schema(); the JSON key stays "schema".
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(RequestModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JSONSchemaFormat] = None

    @model_validator(mode="after")
    def _schema_given(self):
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.schema_ is None):
            raise ValueError("type json_schema needs json_schema.schema, the JSON Schema the answer must follow")
        return self


class NamedFunction(RequestModel):
    name: str


class NamedToolChoice(RequestModel):
    """`tool_choice` naming the one function the model must call."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Union[Literal["none", "auto", "required"], NamedToolChoice]


class SamplingRequest(RefusingRequest):
    """Fields shared by chat and text completions."""

    model: Optional[str] = Field(None, description="Model id; the slot's default when omitted")
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=0)
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0)
    logit_bias: Optional[dict[str, float]] = None
    seed: Optional[StrictInt] = Field(
        None, ge=SEED_RANGE[0], le=SEED_RANGE[1], description="Same seed, prompt and parameters: the same answer"
    )
    stop: Union[str, list[str], None] = None
    # vLLM's extension: keep generating past end-of-sequence tokens until max_tokens
    # (benchmarks use it so every request does the same work).
    ignore_eos: bool = False
    # vLLM's extension: no end-of-sequence token before this many tokens (stop strings still end
    # the answer). The Realtime conversation asks for one so a response always says something.
    min_tokens: Optional[StrictInt] = Field(None, ge=0)
    n: Optional[StrictInt] = Field(None, ge=1, description="Choices to generate (up to the slot's llm.max_n)")
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    user: Optional[str] = None
    # OpenAI's prompt-caching hint: requests sharing it are routed to the replica holding their
    # prefix cache (docs/routing.md); `user` and the x-session-id header are the fallbacks.
    prompt_cache_key: Optional[str] = Field(None, max_length=1024)
    # JSON answers, enforced token by token (deployments/llm/constraints.py, docs/api/chat.md).
    response_format: Optional[ResponseFormat] = None

    # Tokens generated when the request sets no limit; None: the slot's llm.default_max_tokens.
    default_max_tokens: ClassVar[Optional[int]] = None

    @model_validator(mode="after")
    def _check_common(self):
        stops = self.stop_list()
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"stop: at most {MAX_STOP_SEQUENCES} stop sequences are allowed")
        if any(s == "" for s in stops):
            raise ValueError("stop: stop sequences must not be empty")
        for key in self.logit_bias or {}:
            if not key.lstrip("-").isdigit():
                raise ValueError(f"logit_bias: keys must be token ids, got {key!r}")
        budget = self.token_budget()
        if self.min_tokens and budget is not None and self.min_tokens > budget:
            raise ValueError(f"min_tokens ({self.min_tokens}) must not exceed the token limit ({budget})")
        return self

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def choice_count(self) -> int:
        return self.n or 1

    def logprob_count(self) -> Optional[int]:
        """How many alternatives each token's log-probability comes with; None: no logprobs."""
        return None


def refuse_unserved(data: dict[str, Any], refused: dict[str, str]) -> None:
    """A 400 naming the first field of OpenAI's request that is set and that nothing here serves."""
    for name, why in refused.items():
        value = data.get(name)
        if value is None or (name == "modalities" and isinstance(value, list) and set(value) <= {"text"}):
            continue
        raise ValueError(f"{name}: {why}")


# The chat request's fields that would change the answer and that no slot here can honour
# (docs/api/chat.md sorts every field of OpenAI's request).
REFUSED_CHAT_FIELDS = {
    "audio": "audio output is not served by chat completions here; use /v1/audio/speech",
    "modalities": "only text output is served by chat completions here; use /v1/audio/speech for audio",
    "functions": "the deprecated `functions` are not served; send them as `tools`",
    "function_call": "the deprecated `function_call` is not served; use `tool_choice` with `tools`",
    "web_search_options": "web search is not served here",
    "moderation": "moderation is not served here",
    "verbosity": "verbosity is not served here; ask for it in the messages or set max_tokens",
}


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list[ToolDefinition]] = None
    tool_choice: Optional[ToolChoice] = None
    parallel_tool_calls: Optional[bool] = None  # OpenAI's default: true
    chat_template_kwargs: Optional[dict[str, Any]] = None
    logprobs: Optional[StrictBool] = Field(None, description="Return each answer token's log-probability")
    top_logprobs: Optional[StrictInt] = Field(
        None, ge=0, le=MAX_TOP_LOGPROBS, description="With logprobs: the most likely alternatives per token"
    )
    # Passed to the chat template for models whose template reads it (gpt-oss); a 400 otherwise
    # (deployments/llm/prompts.py), since nothing else here can honour it.
    reasoning_effort: Optional[str] = Field(None, max_length=32)

    refused_fields: ClassVar[dict[str, str]] = REFUSED_CHAT_FIELDS

    @model_validator(mode="after")
    def _check_logprobs(self):
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs: true")
        return self

    def logprob_count(self) -> Optional[int]:
        return (self.top_logprobs or 0) if self.logprobs else None

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _one_tool_choice(cls, value: Any) -> Any:
        """One message for a tool_choice of neither shape (not one per union member)."""
        shapes = '\'none\', \'auto\', \'required\' or {"type": "function", "function": {"name": ...}}'
        if value is None or value in ("none", "auto", "required"):
            return value
        if isinstance(value, dict):
            try:
                return NamedToolChoice.model_validate(value)
            except ValidationError:
                pass
        raise ValueError(f"must be {shapes}")

    def has_images(self) -> bool:
        """Image parts go to a vision model only (deployments/ingress/serving/generation.py)."""
        return any(m.has_image() for m in self.messages)

    def token_budget(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens

    def template_tools(self) -> Optional[list[dict[str, Any]]]:
        if not self.tools or self.tool_choice == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]


class CompletionRequest(SamplingRequest):
    # Token ids are integers, never booleans (JSON's false is no token id 0).
    prompt: Union[str, list[str], list[StrictInt]]
    echo: bool = False
    suffix: Optional[str] = None
    logprobs: Optional[StrictInt] = Field(
        None, ge=0, le=MAX_COMPLETION_LOGPROBS, description="Log-probabilities of this many alternatives per token"
    )
    best_of: Optional[StrictInt] = Field(None, ge=1)

    default_max_tokens: ClassVar[Optional[int]] = COMPLETION_DEFAULT_MAX_TOKENS

    @model_validator(mode="after")
    def _check_prompt(self):
        if isinstance(self.prompt, list):
            if len(self.prompt) == 0:
                raise ValueError("prompt: must not be empty")
            if isinstance(self.prompt[0], str) and len(self.prompt) != 1:
                raise ValueError("prompt: only one prompt per request is supported")
        if self.suffix:
            raise ValueError("suffix: insertion (fill-in-the-middle) is not supported")
        if self.best_of not in (None, 1, self.choice_count()):
            raise ValueError("best_of: ranking candidates server-side is not served; ask for n choices instead")
        if self.echo and self.token_ids() is not None:
            raise ValueError("echo: a prompt of token ids cannot be echoed as text here; send the prompt as text")
        if self.echo and self.logprobs is not None:
            raise ValueError("echo: the prompt's log-probabilities are not served; drop echo or logprobs")
        return self

    def token_budget(self) -> Optional[int]:
        return self.max_tokens

    def token_ids(self) -> Optional[list[int]]:
        """The prompt as token ids, or None for a text prompt."""
        if isinstance(self.prompt, list) and isinstance(self.prompt[0], int):
            return list(self.prompt)  # type: ignore[arg-type]
        return None

    def prompt_text(self) -> Optional[str]:
        """The prompt as text, or None for token ids."""
        if isinstance(self.prompt, str):
            return self.prompt
        return None if self.token_ids() is not None else self.prompt[0]  # type: ignore[return-value]

    def logprob_count(self) -> Optional[int]:
        return self.logprobs


# ---------------------------------------------------------------------------------------------
# Responses


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # served from the prefix cache, not prefilled again


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: Optional[PromptTokensDetails] = None

    @model_serializer(mode="wrap")
    def _without_unknown_details(self, handler):
        # A backend that cannot tell (the remote CUDA worker) leaves the details out, not null.
        data = handler(self)
        if data.get("prompt_tokens_details") is None:
            data.pop("prompt_tokens_details", None)
        return data


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ToolCallDelta(ToolCall):
    index: int


class AssistantMessage(OmitNoneModel):
    role: Literal["assistant"] = "assistant"
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None


class DeltaMessage(OmitNoneModel):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCallDelta]] = None


# schema_not_met: a structured answer that failed its JSON Schema on every attempt, withheld
# (deployments/ingress/serving/structured.py); OpenAI's strict mode has no such case.
FinishReason = Optional[Literal["stop", "length", "tool_calls", "content_filter", "schema_not_met"]]


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: FinishReason = None
    logprobs: Optional[ChoiceLogprobs] = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChoice]
    usage: UsageInfo
    system_fingerprint: Optional[str] = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    finish_reason: FinishReason = None
    logprobs: Optional[ChoiceLogprobs] = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=now)
    model: str
    choices: list[ChatChunkChoice]
    usage: Optional[UsageInfo] = None


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: FinishReason = None
    logprobs: Optional[CompletionLogprobs] = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    choices: list[CompletionChoice]
    usage: Optional[UsageInfo] = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "ominix-serve"
    type: str
    endpoints: list[str] = []
    loaded: bool = False  # on at least one replica of its slot
    alias_of: Optional[str] = None  # an alias (OminiX-API's family names): the model it names
    parent: Optional[str] = None  # a LoRA adapter: the model it runs on (vLLM's field)


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
