"""OpenAI's Responses API: POST /v1/responses (JSON or SSE events) and its WebSocket mode on
the same path, POST /v1/responses/compact, and the stored responses: GET and DELETE
/v1/responses/{id}, GET /v1/responses/{id}/input_items, and POST /v1/responses/{id}/cancel for a
background one. Served by translation onto chat completions (ingress/serving/responses.py,
responses_socket.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from fastapi import APIRouter, Body, Depends, Header, Query, WebSocket, WebSocketDisconnect

from deployments.ingress.responses import json_response
from deployments.ingress.routers.chat import request_doc
from deployments.ingress.serving.responses import MAX_LISTED_ITEMS, ServingResponses
from deployments.ingress.serving.responses_socket import ResponsesSocket
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request
from deployments.protocol.responses import CompactRequest, ResponsesRequest

router = APIRouter(tags=["responses"])


@router.post("/v1/responses", openapi_extra=request_doc(ResponsesRequest))
async def create_response(
    body: dict[str, Any] = Body(..., description="An OpenAI Responses API request"),
    x_session_id: Optional[str] = Header(None, description="Keeps a conversation on one replica (docs/routing.md)"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingResponses(state).create(body, x_session_id)


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket, state: IngressState = Depends(ingress_state)):
    await websocket.accept()
    try:
        await ResponsesSocket(websocket, state).serve()
    except WebSocketDisconnect:
        return


@router.post("/v1/responses/compact", openapi_extra=request_doc(CompactRequest))
async def compact_response(
    body: dict[str, Any] = Body(
        ..., description="A conversation to compact (Open Responses' CompactResponseMethodPublicBody)"
    ),
    x_session_id: Optional[str] = Header(None, description="Keeps a conversation on one replica (docs/routing.md)"),
    state: IngressState = Depends(ingress_state),
):
    return await ServingResponses(state).compact(body, x_session_id)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    response_id: str,
    stream: bool = Query(False, description="Replaying a stored response's events is not served"),
    state: IngressState = Depends(ingress_state),
):
    if stream:
        raise invalid_request("stream: replaying a stored response's events is not served here", "stream")
    return await ServingResponses(state).retrieve(response_id)


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, state: IngressState = Depends(ingress_state)):
    return await ServingResponses(state).cancel(response_id)


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, state: IngressState = Depends(ingress_state)):
    return json_response(await ServingResponses(state).delete(response_id))


@dataclass
class ItemPageQuery:
    """The query of a stored item list (input items, a conversation's items), OpenAI's cursor."""

    after: Optional[str] = Query(None, description="An item id: list the items after it")
    limit: int = Query(20, ge=1, le=MAX_LISTED_ITEMS)
    order: Literal["asc", "desc"] = Query("desc")


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str, page: ItemPageQuery = Depends(), state: IngressState = Depends(ingress_state)
):
    return await ServingResponses(state).input_items(response_id, page.after, page.limit, page.order)
