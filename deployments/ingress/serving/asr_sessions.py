"""Streaming transcription sessions as the ingress sees them: every call of a session carries
its sid as the routing key, so the ASR slot's `SessionAffinityRouter` delivers it to the one
replica that holds the session (docs/routing.md). MiniInfer's HTTP routes and the Realtime
WebSocket both go through `ServingASRSessions`.

A sid that does not name a replica is a 404 without a slot call. A replica that dies under a
session's request means the session is lost (410), never a silent new session elsewhere.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from deployments.asr.streaming import session_lost, session_not_found
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, unavailable
from deployments.routing.affinity import owner_of, replica_key

REPLICA_DIED = "replica_died"  # the code from_exception gives a replica that died under a request
LIST_TIMEOUT_S = 60.0


class ServingASRSessions:
    def __init__(self, state: IngressState):
        self.state = state
        self.asr = state.slot("asr")

    async def create(
        self,
        model: Optional[str],
        language: Optional[str] = None,
        overrides: Optional[dict] = None,
        diarize: bool = False,
        prompt: Optional[str] = None,
        logprobs: bool = False,
    ):
        resolved = self.state.catalog.resolve("asr", model)
        return await self.asr.call("stream_create", language, overrides, diarize, prompt, logprobs, model=resolved)

    async def call(self, method: str, sid: str, *args: Any) -> dict:
        """A session's request, on the replica its sid names."""
        if owner_of(sid) is None:
            raise session_not_found(sid)
        try:
            return await self.asr.call(method, sid, *args, session=sid)
        except APIError as e:
            if e.code == REPLICA_DIED:
                raise session_lost(sid) from None
            raise

    async def feed(self, sid: str, pcm: bytes, finish: bool = False) -> dict:
        return await self.call("stream_feed", sid, pcm, finish)

    async def session_state(self, sid: str) -> dict:
        return await self.call("stream_state", sid)

    async def delete(self, sid: str) -> dict:
        return await self.call("stream_delete", sid)

    async def sessions(self) -> dict:
        """Every ASR replica's live sessions (the replicas from the control plane; without
        one, the replica Serve picks)."""
        try:
            return await asyncio.wait_for(self._sessions(), LIST_TIMEOUT_S)
        except TimeoutError:  # never a bare TimeoutError: the route timeout would claim it
            raise unavailable(f"The ASR replicas did not list their sessions within {LIST_TIMEOUT_S:g} s") from None

    async def _sessions(self) -> dict:
        replicas = await self._asr_replicas()
        if not replicas:
            answers = [await self.asr.call("stream_sessions")]
        else:
            # One replica after the other: handle calls made concurrently inside one request
            # share its internal request id, and Serve's router can then hand one call's
            # replica to the other and leave the first pending forever.
            answers = []
            for replica in replicas:
                try:
                    answer = await self.asr.call("stream_sessions", session=replica_key(replica, "list"))
                except APIError:
                    continue
                # A replica the control plane still lists but that is gone: its key reached
                # another replica, whose sessions are counted once, from its own answer.
                if answer.get("replica") == replica:
                    answers.append(answer)
        sessions = [s for a in answers for s in a["sessions"]]
        return {"live": len(sessions), "sessions": sessions}

    async def _asr_replicas(self) -> list[str]:
        if self.state.control is None:
            return []
        status = await self.state.control.call("status")
        return [r["replica_id"] for r in status.get("asr", {}).get("replicas", [])]
