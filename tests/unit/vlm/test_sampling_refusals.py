"""What the VLM slot cannot honour of a chat request is a 400 naming the field (mlx-vlm's
generation has no tools, end-of-sequence control or minimum length here)."""

from __future__ import annotations

import pytest

from deployments.protocol.errors import APIError
from deployments.protocol.openai import ChatCompletionRequest
from deployments.vlm.deployment import sampling

HELLO = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "name, value",
    [
        ("ignore_eos", True),
        ("min_tokens", 2),
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
    ],
)
def test_a_field_the_vlm_slot_cannot_honour_is_refused_by_name(name, value):
    request = ChatCompletionRequest(messages=HELLO, **{name: value})
    with pytest.raises(APIError) as info:
        sampling(request, 8)
    assert (info.value.status_code, info.value.param) == (400, name)


def test_plain_sampling_passes_through():
    params = sampling(ChatCompletionRequest(messages=HELLO, temperature=0.3, min_tokens=0), 8)
    assert (params.temperature, params.max_tokens, params.min_tokens) == (0.3, 8, 0)
