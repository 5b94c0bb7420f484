"""Which model ids the graph serves, and which slot serves each: the ingress's routing table.

Routing is by exact model id; an id that no slot allows is a 404 before any slot is called
(mlx-lm's server loads whatever a request names, which is a known complaint). A request that
names no model goes to the slot's current default, which operators can change at runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from deployments.control.policy import check_model_allowed
from deployments.protocol.errors import APIError, model_not_found
from deployments.protocol.openai import ModelCard
from deployments.slots import SLOTS


def slot_disabled(name: str) -> APIError:
    """Every route of a slot that this graph does not run answers this, the same on each."""
    slot = SLOTS[name]
    return APIError(
        404,
        f"The {slot.label} slot is not enabled in this graph ({slot.name}.enabled is false), so "
        "this route is not served here",
        "invalid_request_error",
        None,
        "slot_disabled",
    )


@dataclass
class SlotModels:
    models: list[str]  # the configured allow-list, the configured default first
    models_dir: Optional[str] = None
    aliases: dict[str, str] = field(default_factory=dict)  # short name (lower case) -> model id
    options: dict = field(default_factory=dict)  # what the slot's routes check first (the VLM's image limits)


@dataclass
class ModelCatalog:
    slots: dict[str, SlotModels] = field(default_factory=dict)

    @classmethod
    def from_config(cls, raw: dict[str, dict]) -> ModelCatalog:
        return cls({slot: SlotModels(**spec) for slot, spec in raw.items()})

    def resolve(self, slot: str, model: Optional[str]) -> Optional[str]:
        """The model id a request asks `slot` for (None: the slot's default); 404 if not served."""
        if slot not in self.slots:
            raise slot_disabled(slot)
        if not model:
            return None
        model = self.canonical(slot, model)
        self.check_loadable(slot, model, not_found=True)
        return model

    def canonical(self, slot: str, model: str) -> str:
        """The model id behind an alias (OminiX-API's image names `flux`, `zimage`), else `model`."""
        spec = self.slots.get(slot)
        return spec.aliases.get(model.lower(), model) if spec else model

    def ids(self, slot: str) -> list[str]:
        spec = self.slots.get(slot)
        return list(spec.models) if spec else []

    def check_loadable(self, slot: str, model: str, not_found: bool = False) -> None:
        spec = self.slots[slot]
        model = self.canonical(slot, model)
        try:
            check_model_allowed(model, spec.models, spec.models_dir, slot)
        except APIError as e:
            if not_found and e.status_code == 403:
                raise model_not_found(model, self.all_ids()) from None
            raise

    def all_ids(self) -> list[str]:
        return [m for spec in self.slots.values() for m in spec.models]

    def cards(self, loaded: dict[str, set[str]] | None = None) -> list[ModelCard]:
        loaded = loaded or {}
        ids = {
            slot: list(dict.fromkeys([*spec.models, *sorted(loaded.get(slot, ()))]))
            for slot, spec in self.slots.items()
        }
        return [
            ModelCard(id=m, type=slot, endpoints=SLOTS[slot].endpoints(), loaded=m in loaded.get(slot, set()))
            for slot, models in ids.items()
            for m in models
        ]
