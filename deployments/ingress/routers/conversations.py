"""OpenAI's Conversations API: POST /v1/conversations, GET/POST/DELETE
/v1/conversations/{id}, and its items: GET/POST /v1/conversations/{id}/items, GET/DELETE
/v1/conversations/{id}/items/{item_id}. Served from the graph's record store
(ingress/serving/conversations.py); a Responses request names one as `conversation`."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends

from deployments.ingress.routers.responses import ItemPageQuery
from deployments.ingress.serving.conversations import ServingConversations
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["conversations"])


@router.post("/v1/conversations")
async def create_conversation(
    body: Optional[dict[str, Any]] = Body(None, description="items (up to 20) and metadata"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingConversations(state).create(body or {})


@router.get("/v1/conversations/{conversation_id}")
async def retrieve_conversation(conversation_id: str, state: IngressState = Depends(ingress_state)):
    return await ServingConversations(state).retrieve(conversation_id)


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(
    conversation_id: str,
    body: dict[str, Any] = Body(..., description="metadata"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingConversations(state).update(conversation_id, body)


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, state: IngressState = Depends(ingress_state)):
    return await ServingConversations(state).delete(conversation_id)


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(
    conversation_id: str, page: ItemPageQuery = Depends(), state: IngressState = Depends(ingress_state)
):
    return await ServingConversations(state).list_items(conversation_id, page.after, page.limit, page.order)


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(
    conversation_id: str,
    body: dict[str, Any] = Body(..., description="items (up to 20)"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingConversations(state).add_items(conversation_id, body)


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def retrieve_item(conversation_id: str, item_id: str, state: IngressState = Depends(ingress_state)):
    return await ServingConversations(state).item(conversation_id, item_id)


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(conversation_id: str, item_id: str, state: IngressState = Depends(ingress_state)):
    return await ServingConversations(state).delete_item(conversation_id, item_id)
