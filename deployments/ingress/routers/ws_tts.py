"""WebSocket TTS, /ws/v1/tts: OminiX-API's MiniMax-T2A-style protocol.

connect -> {"event": "connected_success"}
task_start {voice_setting: {voice_id, speed, language}, audio_setting: {format}, model?}
    -> {"event": "task_started", "sample_rate", "channels", "bits_per_sample", "format"}
task_continue {text, voice_id?} -> task_progress {"data": {"audio": "<hex>"}, "is_final": false}
    per audio chunk as it is generated, then one with "audio": "" and "is_final": true
task_finish -> the server closes the connection.

Audio framing: `pcm` (the default, what OminiX-API sends): raw PCM16 LE mono at the model's
rate. `wav`: the same, but the first chunk of each text starts with a 44-byte streaming WAV
header (sizes 0xFFFFFFFF), so each text is one WAV stream. Errors are
`{"event": "error", "message"}` events that leave the session open. Texts are processed one
after the other. A session silent for the idle timeout is told so and closed.

The route accepts and closes the connection; `TTSSession` (ingress/serving/tts_sessions.py)
handles each message.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, WebSocket, WebSocketDisconnect

from deployments.ingress.serving.tts_sessions import ClientGone, TTSSession
from deployments.ingress.state import IngressState, ingress_state

router = APIRouter(tags=["audio"])


@router.websocket("/ws/v1/tts")
async def ws_tts(websocket: WebSocket, state: IngressState = Depends(ingress_state)):
    await websocket.accept()
    session = TTSSession(websocket, state)
    try:
        await session.send({"event": "connected_success"})
        if await session.open():
            while await session.step():
                pass
    except (WebSocketDisconnect, ClientGone):
        return
    try:
        await websocket.close()
    except RuntimeError:
        pass  # already closed
