"""POST /v1/agent/stream: the voice agent (LLM slot -> TTS slot, sentence by sentence), as SSE."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from deployments.ingress.serving.agent import ServingAgent
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.agent import AgentRequest

router = APIRouter(tags=["agent"])


@router.post("/v1/agent/stream")
async def agent_stream(request: AgentRequest, state: IngressState = Depends(ingress_state)) -> StreamingResponse:
    """SSE: `{"type": "meta", ...}`, per sentence `{"type": "text"}` then `{"type": "audio",
    "delta": <base64 s16le>}` chunks, then `data: [DONE]` (an error mid-stream: an error event,
    then `[DONE]`)."""
    return await ServingAgent(state).stream(request)
