"""The TTS voices for the ingress (GET/POST/DELETE /v1/voices): listing them, registering a
cloned voice, removing one.

The TTS slot owns the registry file (any replica may serve the call: the file is the source
of truth for all of them).
"""

from __future__ import annotations

from typing import Any, Optional

from deployments.ingress.state import IngressState


class ServingVoices:
    """The TTS slot is looked up first: a graph without it answers `slot_disabled`."""

    def __init__(self, state: IngressState):
        self.tts = state.slot("tts")

    async def list(self) -> Any:
        return await self.tts.call("voices")

    async def register(
        self, name: str, audio: bytes, reference_text: str, aliases: list[str], language: Optional[str]
    ) -> Any:
        return await self.tts.call("register_voice", name, audio, reference_text, aliases, language)

    async def delete(self, name: str) -> Any:
        return await self.tts.call("delete_voice", name)
