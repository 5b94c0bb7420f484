"""MiniInfer's streaming transcription sessions (docs/api/streaming-asr.md):

- `POST /v1/audio/stream/sessions[?model=&language=&diarize=1]` -> `{"sid", "model", "sample_rate"}`
  (diarized: every segment gets a 0-based `speaker`, the answer a `speakers` count)
- `POST /v1/audio/stream/sessions/{sid}[?finish=1]`, body: raw s16le 16 kHz mono PCM ->
  `{"text", "partial", "buffer_s", "utterance_final", "final", "segments", ...}`
- `GET /v1/audio/stream/sessions/{sid}`: the same state, no audio; `DELETE` ends the session
- `GET /v1/audio/stream/sessions` -> `{"live": N, "sessions": [...]}`

A sid is `@<replica>/<token>` (it names its replica), so the routes take it as a path.
The router only parses; `ServingASRSessions` routes each call to the session's replica.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from deployments.ingress.serving.asr_sessions import ServingASRSessions
from deployments.ingress.state import IngressState, ingress_state
from deployments.protocol.errors import invalid_request

router = APIRouter(tags=["audio"])
PREFIX = "/v1/audio/stream/sessions"
_TRUE = ("1", "true", "yes", "on")


def _flag(request: Request, name: str) -> bool:
    value = request.query_params.get(name, "0").strip().lower()
    if value not in _TRUE + ("0", "false", "no", "off", ""):
        raise invalid_request(f"`{name}` must be 1/true or 0/false, got '{value}'", name)
    return value in _TRUE


@router.post(PREFIX)
async def create_session(request: Request, state: IngressState = Depends(ingress_state)):
    diarize = _flag(request, "diarize")
    query = request.query_params
    serving = ServingASRSessions(state)
    return JSONResponse(
        await serving.create(query.get("model") or None, query.get("language") or None, diarize=diarize)
    )


@router.get(PREFIX)
async def list_sessions(state: IngressState = Depends(ingress_state)):
    return JSONResponse(await ServingASRSessions(state).sessions())


@router.post(PREFIX + "/{sid:path}")
async def feed_session(sid: str, request: Request, state: IngressState = Depends(ingress_state)):
    finish = _flag(request, "finish")
    serving = ServingASRSessions(state)
    return JSONResponse(await serving.feed(sid, await request.body(), finish))


@router.get(PREFIX + "/{sid:path}")
async def session_state(sid: str, state: IngressState = Depends(ingress_state)):
    return JSONResponse(await ServingASRSessions(state).session_state(sid))


@router.delete(PREFIX + "/{sid:path}")
async def delete_session(sid: str, state: IngressState = Depends(ingress_state)):
    return JSONResponse(await ServingASRSessions(state).delete(sid))
