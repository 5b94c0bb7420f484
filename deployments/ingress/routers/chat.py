"""POST /v1/chat/completions on the LLM slot, or on the VLM slot for a VLM model id (images):
JSON or true token streaming (SSE). Requests for CUDA-mapped model ids go to the CUDA proxy
instead (see ingress/serving/cuda.py). Which one answers is `serve_chat`'s choice
(ingress/serving/generation.py)."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Body, Depends, Header
from pydantic import BaseModel

from deployments.ingress.serving.generation import serve_chat
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.openai import ChatCompletionRequest

router = APIRouter(tags=["chat"])


def _inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its `$defs` inlined, for an OpenAPI requestBody (the body
    is parsed in the route, so FastAPI cannot document it by itself)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def request_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI requestBody of a route that parses its JSON body itself."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": _inline_schema(model)}}}}


CHAT_REQUEST_DOC = request_doc(ChatCompletionRequest)


@router.post("/v1/chat/completions", openapi_extra=CHAT_REQUEST_DOC)
async def create_chat_completion(
    body: dict[str, Any] = Body(..., description="An OpenAI chat completion request"),
    x_session_id: Optional[str] = Header(None, description="Keeps a conversation on one replica (docs/routing.md)"),
    state: IngressState = Depends(ingress_state),
):
    # The body is validated after routing: a CUDA-mapped id follows the CUDA route's own rules.
    return await serve_chat(state, body, x_session_id)
