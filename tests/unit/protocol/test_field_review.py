"""Every field of the openai SDK's own chat and completions request types is sorted in
docs/api/chat.md (served, ignored or refused), and the refused ones are refused by the
request models: an SDK upgrade that adds a field fails here until someone sorts it. The same
for the Responses API (docs/api/responses.md) and the anthropic SDK's Messages request
(docs/api/messages.md)."""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params
from pydantic import ValidationError

from deployments.protocol.anthropic import REFUSED_MESSAGES_FIELDS, MessagesRequest
from deployments.protocol.openai import REFUSED_CHAT_FIELDS, ChatCompletionRequest
from deployments.protocol.responses import REFUSED_RESPONSES_FIELDS, ResponsesRequest

CHAT_DOC = Path(__file__).resolve().parents[3] / "docs" / "api" / "chat.md"


def sdk_fields(params: type) -> set[str]:
    return set(typing.get_type_hints(params)) | {"stream"}


def table_fields(heading: str) -> set[str]:
    """The backticked field names in the first column of the table under `heading`."""
    section = CHAT_DOC.read_text().split(f"### {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.split(".")[0] for row in rows for name in re.findall(r"`([a-z_.]+)`", row)}


@pytest.mark.parametrize(
    "params, heading",
    [
        (chat_create_params.CompletionCreateParamsBase, "Chat completions"),
        (completion_create_params.CompletionCreateParamsBase, "Text completions"),
    ],
)
def test_every_sdk_field_is_sorted_in_the_docs(params, heading):
    assert sdk_fields(params) - table_fields(heading) == set()


@pytest.mark.parametrize("field", sorted(REFUSED_CHAT_FIELDS))
def test_every_refused_field_is_a_validation_error_naming_it(field):
    value = ["audio"] if field == "modalities" else {"x": 1}
    with pytest.raises(ValidationError) as info:
        ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], **{field: value})
    assert str(info.value).count(f"{field}:") == 1


# ------------------------------------------------------------------ the Responses and Messages APIs

API_DOCS = CHAT_DOC.parent


def doc_table_fields(page: str, heading: str) -> set[str]:
    section = (API_DOCS / page).read_text().split(f"## {heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name.split(".")[0] for row in rows for name in re.findall(r"`([a-z_.]+)`", row)}


def test_every_responses_field_is_sorted_in_the_docs():
    from openai.types.responses import response_create_params

    fields = sdk_fields(response_create_params.ResponseCreateParamsBase)
    assert fields - doc_table_fields("responses.md", "Every field of the request") == set()


def test_every_messages_field_is_sorted_in_the_docs():
    from anthropic.types import message_create_params

    fields = sdk_fields(message_create_params.MessageCreateParamsBase)
    assert fields - doc_table_fields("messages.md", "Every field of the request") == set()


@pytest.mark.parametrize("field", sorted(REFUSED_RESPONSES_FIELDS))
def test_every_refused_responses_field_is_a_validation_error_naming_it(field):
    with pytest.raises(ValidationError) as info:
        ResponsesRequest(input="hi", **{field: {"x": 1}})
    assert str(info.value).count(f"{field}:") == 1


@pytest.mark.parametrize("field", sorted(REFUSED_MESSAGES_FIELDS))
def test_every_refused_messages_field_is_a_validation_error_naming_it(field):
    with pytest.raises(ValidationError) as info:
        MessagesRequest(model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}], **{field: {"x": 1}})
    assert str(info.value).count(f"{field}:") == 1
