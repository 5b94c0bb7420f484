"""The TTS voices for the ingress (GET/POST/DELETE /v1/voices): listing them, registering a
cloned voice, removing one; and the lists OpenAI-compatible TTS clients read (GET
/v1/audio/voices, /v1/audio/models: Open WebUI's OpenAI engine fills its menus from them).

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
        self.catalog = state.catalog

    async def list(self) -> Any:
        return await self.tts.call("voices")

    async def choices(self, model: Optional[str]) -> dict[str, Any]:
        """`{"voices": [{"id", "name"}]}`: every voice `model` speaks (the slot's default model
        when None), its default first; `id` is what `voice` takes, `name` adds the other names
        it answers to (OpenAI's, on Kokoro)."""
        listing = await self.tts.call("voices", model=model)
        voices = sorted(listing["voices"], key=lambda v: v["name"] != listing.get("default_voice"))
        return {"voices": [{"id": v["name"], "name": voice_label(v)} for v in voices]}

    def speech_models(self) -> dict[str, Any]:
        """`{"models": [{"id"}]}`: the models the TTS slot serves."""
        return {"models": [{"id": model} for model in self.catalog.ids("tts")]}

    async def register(
        self, name: str, audio: bytes, reference_text: str, aliases: list[str], language: Optional[str]
    ) -> Any:
        return await self.tts.call("register_voice", name, audio, reference_text, aliases, language)

    async def delete(self, name: str) -> Any:
        return await self.tts.call("delete_voice", name)


def voice_label(voice: dict[str, Any]) -> str:
    aliases = voice.get("aliases") or []
    return f"{voice['name']} ({', '.join(aliases)})" if aliases else voice["name"]
