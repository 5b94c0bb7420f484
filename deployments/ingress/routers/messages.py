"""Anthropic's Messages API: POST /v1/messages (JSON or Anthropic's SSE events) and
POST /v1/messages/count_tokens. Served by translation onto chat completions
(ingress/serving/messages.py); errors here are Anthropic-shaped."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends, Header

from deployments.ingress.routers.chat import request_doc
from deployments.ingress.serving.messages import ServingMessages
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.anthropic import CountTokensRequest, MessagesRequest

router = APIRouter(tags=["messages"])


@router.post("/v1/messages", openapi_extra=request_doc(MessagesRequest))
async def create_message(
    body: dict[str, Any] = Body(..., description="An Anthropic Messages API request"),
    x_session_id: Optional[str] = Header(None, description="Keeps a conversation on one replica (docs/routing.md)"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingMessages(state).create(body, x_session_id)


@router.post("/v1/messages/count_tokens", openapi_extra=request_doc(CountTokensRequest))
async def count_message_tokens(
    body: dict[str, Any] = Body(..., description="The messages, system prompt and tools to count"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingMessages(state).count_tokens(body)
