"""From an OpenAI request to prompt token ids, with the model's own chat template.

Works on mlx-lm's TokenizerWrapper (a Hugging Face tokenizer plus what mlx-lm infers about the
model family: think markers, tool-call markers). No MLX here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.generation.output import NORMAL, REASONING
from deployments.protocol.errors import invalid_request
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest


@dataclass
class Prompt:
    token_ids: list[int]
    # Whether the model continues inside a thinking block the template opened.
    initial_state: str = NORMAL
    # Chat answers split thinking from the answer; text completions return raw text.
    split_reasoning: bool = True
    # How many leading tokens are the system prompt: where the prefix cache keeps a copy.
    system_end: int = 0


def chat_prompt(tokenizer: Any, request: ChatCompletionRequest) -> Prompt:
    messages = [m.for_template() for m in request.messages]
    kwargs = dict(request.chat_template_kwargs or {})
    tools = request.template_tools()
    if tools:
        kwargs["tools"] = tools
    if not getattr(tokenizer, "has_chat_template", False):
        raise invalid_request("This model has no chat template; use /v1/completions with a plain prompt.")
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", _reasoning_effort(tokenizer, request.reasoning_effort))
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
    except Exception as e:  # a template may raise on shapes it does not support
        raise invalid_request(f"The model's chat template rejected the messages: {e}", "messages") from None
    ids = tokenizer.encode(text, add_special_tokens=False)
    state = NORMAL
    if getattr(tokenizer, "has_thinking", False):
        if text.rfind(tokenizer.think_start) > text.rfind(tokenizer.think_end):
            state = REASONING
    return Prompt(ids, state, system_end=_system_end(tokenizer, messages, ids, kwargs))


def _reasoning_effort(tokenizer: Any, effort: str) -> str:
    """`reasoning_effort` reaches the model only through a chat template that reads it (as
    vLLM passes it); for any other model it would be dropped, so it is a 400."""
    template = getattr(tokenizer, "chat_template", None)
    sources = template.values() if isinstance(template, dict) else [template or ""]
    if not any("reasoning_effort" in source for source in sources):
        raise invalid_request(
            "reasoning_effort: this model's chat template has no reasoning effort; "
            'use chat_template_kwargs (e.g. {"enable_thinking": false}) where the template offers it',
            "reasoning_effort",
        )
    return effort


def _system_end(tokenizer: Any, messages: list[dict], ids: list[int], kwargs: dict) -> int:
    """The length of the prompt's system part: where it stops matching the same system
    messages rendered before an empty user turn (as mlx_lm.server finds it)."""
    leading = 0
    while leading < len(messages) and messages[leading].get("role") in ("system", "developer"):
        leading += 1
    if leading == 0 or leading == len(messages):
        return 0
    try:
        text = tokenizer.apply_chat_template(
            messages[:leading] + [{"role": "user", "content": ""}],
            add_generation_prompt=False,
            tokenize=False,
            **kwargs,
        )
    except Exception:  # only an optimisation: no split point, no harm
        return 0
    system_ids = tokenizer.encode(text, add_special_tokens=False)
    for i, (a, b) in enumerate(zip(system_ids, ids)):
        if a != b:
            return i
    return 0


def completion_prompt(tokenizer: Any, request: CompletionRequest) -> Prompt:
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        vocab = len(tokenizer)
        if any(t < 0 or t >= vocab for t in prompt):
            raise invalid_request(f"prompt: token ids must be in [0, {vocab})", "prompt")
        return Prompt(list(prompt), split_reasoning=False)
    text = prompt[0] if isinstance(prompt, list) else prompt
    if not text:
        raise invalid_request("prompt: must not be empty", "prompt")
    return Prompt(tokenizer.encode(text), split_reasoning=False)
