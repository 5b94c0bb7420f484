"""Which model ids the graph serves, and which slot serves each: the ingress's routing table.

Routing is by exact model id; an id that no slot allows is a 404 before any slot is called
(mlx-lm's server loads whatever a request names, which is a known complaint).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from deployments.protocol.errors import model_not_found
from deployments.protocol.openai import ModelCard

SLOT_ENDPOINTS = {
    "llm": ["/v1/chat/completions", "/v1/completions"],
    "tts": ["/v1/audio/speech", "/v1/audio/speech/clone", "/ws/v1/tts"],
}


@dataclass
class ModelCatalog:
    # slot -> allowed model ids, the first being the slot's default
    slots: dict[str, list[str]] = field(default_factory=dict)

    def resolve(self, slot: str, model: str | None) -> str:
        """The model id to use for a request to `slot`; 404 if the slot does not serve it."""
        allowed = self.slots.get(slot, [])
        if model is None or model == "":
            if allowed:
                return allowed[0]
            raise model_not_found("(none)", self.all_ids())
        if model not in allowed:
            raise model_not_found(model, self.all_ids())
        return model

    def all_ids(self) -> list[str]:
        return [m for ids in self.slots.values() for m in ids]

    def cards(self) -> list[ModelCard]:
        return [
            ModelCard(id=m, type=slot, endpoints=SLOT_ENDPOINTS.get(slot, []))
            for slot, ids in self.slots.items()
            for m in ids
        ]
