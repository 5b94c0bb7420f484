"""OpenAI's Conversations API: a conversation is a stored list of items (messages, function
calls and their outputs, reasoning) with metadata, that clients append to and list (the Agents
SDK's OpenAIConversationsSession), and that a Responses request names as `conversation` to
answer it and have its input and output appended. The requests, the stored record's shape and
the objects returned. No Ray, no MLX.
"""

from __future__ import annotations

import time
from typing import Any, Optional

from pydantic import Field, field_validator

from deployments.protocol.errors import APIError
from deployments.protocol.openai import RequestModel
from deployments.protocol.responses import check_metadata, new_id, normalise_items

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's bound on items added in one create call


class ConversationCreateRequest(RequestModel):
    items: Optional[list[dict[str, Any]]] = Field(None, max_length=MAX_ITEMS_PER_REQUEST)
    metadata: Optional[dict[str, str]] = None
    safety_identifier: Optional[str] = None  # abuse tracking at OpenAI: nothing here

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value):
        return check_metadata(value)


class ConversationUpdateRequest(RequestModel):
    metadata: dict[str, str]

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value):
        return check_metadata(value)


class ItemsCreateRequest(RequestModel):
    items: list[dict[str, Any]] = Field(..., min_length=1, max_length=MAX_ITEMS_PER_REQUEST)


def new_conversation(items: list[dict[str, Any]], metadata: Optional[dict[str, str]]) -> dict[str, Any]:
    """The stored record of a new conversation (its items normalised, each with an id)."""
    return {
        "id": new_id("conv"),
        "created_at": int(time.time()),
        "metadata": metadata or {},
        "items": normalise_items(items, "items"),
    }


def conversation_object(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "object": "conversation",
        "created_at": record["created_at"],
        "metadata": record["metadata"],
    }


def deleted_object(conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}


def item_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Items just added, as items.create returns them."""
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


def find_item(record: dict[str, Any], item_id: str) -> int:
    """The index of `item_id` in the conversation; a 404 naming it when there is none."""
    for index, item in enumerate(record["items"]):
        if item.get("id") == item_id:
            return index
    raise APIError(
        404,
        f"No item '{item_id}' in conversation '{record['id']}'",
        "invalid_request_error",
        "item_id",
        "item_not_found",
    )


def conversation_not_found(conversation_id: str, param: Optional[str] = None) -> APIError:
    return APIError(
        404,
        f"No conversation '{conversation_id}': it was never created here, was deleted, or has expired",
        "invalid_request_error",
        param,
        "conversation_not_found",
    )
