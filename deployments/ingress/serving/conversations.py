"""OpenAI's Conversations API over the graph's record store (deployments/records.py): every
ingress replica sees the same conversations, and they outlive any of them. A write is a
read-modify-write of the conversation's record at its version, tried again when another writer
got in between, so items appended at once by two requests are both kept.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Optional

from deployments.ingress.errors import validate_body
from deployments.ingress.serving.records import edit_record
from deployments.ingress.state import IngressState
from deployments.protocol.conversations import (
    ConversationCreateRequest,
    ConversationUpdateRequest,
    ItemsCreateRequest,
    conversation_not_found,
    conversation_object,
    deleted_object,
    find_item,
    item_list,
    new_conversation,
)
from deployments.protocol.errors import APIError
from deployments.protocol.responses import item_page, normalise_items
from deployments.records import CONVERSATIONS, RecordTooLarge


def too_large(conversation_id: str, error: RecordTooLarge) -> APIError:
    return APIError(
        400,
        f"Conversation '{conversation_id}' would be larger than a stored conversation may be ({error}); "
        "start a new one",
        "invalid_request_error",
        "items",
        "conversation_too_large",
    )


class ServingConversations:
    def __init__(self, state: IngressState):
        self.records = state.record_store()

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        request = validate_body(ConversationCreateRequest, body)
        record = new_conversation(request.items or [], request.metadata)
        try:
            await self.records.put(CONVERSATIONS, record["id"], record, expected_version=0)
        except RecordTooLarge as e:
            raise too_large(record["id"], e) from None
        return conversation_object(record)

    async def stored(self, conversation_id: str, param: Optional[str] = None) -> dict[str, Any]:
        """The conversation's record (its items included); a 404 when there is none."""
        record = await self.records.get(CONVERSATIONS, conversation_id)
        if record is None:
            raise conversation_not_found(conversation_id, param)
        return record.value

    async def retrieve(self, conversation_id: str) -> dict[str, Any]:
        return conversation_object(await self.stored(conversation_id))

    async def update(self, conversation_id: str, body: dict[str, Any]) -> dict[str, Any]:
        request = validate_body(ConversationUpdateRequest, body)

        def set_metadata(record: dict[str, Any]) -> None:
            record["metadata"] = request.metadata

        return conversation_object(await self.change(conversation_id, set_metadata))

    async def delete(self, conversation_id: str) -> dict[str, Any]:
        if not await self.records.delete(CONVERSATIONS, conversation_id):
            raise conversation_not_found(conversation_id)
        return deleted_object(conversation_id)

    async def list_items(self, conversation_id: str, after: Optional[str], limit: int, order: str) -> dict[str, Any]:
        items = (await self.stored(conversation_id))["items"]
        return item_page(items, after, limit, order, f"conversation '{conversation_id}'")

    async def add_items(self, conversation_id: str, body: dict[str, Any]) -> dict[str, Any]:
        request = validate_body(ItemsCreateRequest, body)
        added = normalise_items(request.items, "items")
        await self.append(conversation_id, added)
        return item_list(added)

    async def item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        record = await self.stored(conversation_id)
        return record["items"][find_item(record, item_id)]

    async def delete_item(self, conversation_id: str, item_id: str) -> dict[str, Any]:
        def drop(record: dict[str, Any]) -> None:
            del record["items"][find_item(record, item_id)]

        return conversation_object(await self.change(conversation_id, drop))

    async def append(self, conversation_id: str, items: list[dict[str, Any]], param: Optional[str] = None) -> None:
        """`items` after the conversation's last (a response's input and output, or added ones)."""
        await self.change(conversation_id, lambda record: record["items"].extend(items), param)

    async def change(
        self, conversation_id: str, edit: Callable[[dict[str, Any]], None], param: Optional[str] = None
    ) -> dict[str, Any]:
        """The conversation edited in place and written back over the version read (read again
        and edited again when another writer came first); the record as written."""

        def edited(value: dict[str, Any]) -> dict[str, Any]:
            edit(value)
            return value

        missing = partial(conversation_not_found, conversation_id, param)
        try:
            return await edit_record(self.records, CONVERSATIONS, conversation_id, edited, missing)
        except RecordTooLarge as e:
            raise too_large(conversation_id, e) from None
