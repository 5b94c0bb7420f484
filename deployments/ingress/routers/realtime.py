"""`/v1/realtime`: OpenAI's Realtime WebSocket. With `?intent=transcription` a transcription
session (serving/realtime.py, docs/api/streaming-asr.md); without an intent a speech-to-speech
conversation (serving/conversation.py, docs/api/agent.md). Authentication is the ingress
middleware's, as on /ws/v1/tts (header or subprotocol pair)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, WebSocket, WebSocketDisconnect

from deployments.ingress.serving.asr_sessions import ServingASRSessions
from deployments.ingress.serving.conversation import open_conversation
from deployments.ingress.serving.realtime import Connection, serve
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.realtime import error_event

router = APIRouter(tags=["audio"])


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket, state: IngressState = Depends(ingress_state)):
    await websocket.accept()
    try:
        intent = websocket.query_params.get("intent")
        if intent == "transcription":
            await serve(Connection(websocket, ServingASRSessions(state)))
        elif intent is None:
            conversation = await open_conversation(websocket, state, websocket.query_params.get("model"))
            if conversation is not None:
                await serve(conversation)
        else:
            message = (
                f"Unknown intent {intent!r}: connect with ?intent=transcription, or without one for a conversation"
            )
            await websocket.send_json(error_event(message, "intent"))
            await websocket.close(1008)
    except WebSocketDisconnect:
        return
