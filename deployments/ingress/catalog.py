"""Which model ids the graph serves, and which slot serves each: the ingress's routing table.

Routing is by exact model id; an id that no slot allows is a 404 before any slot is called
(mlx-lm's server loads whatever a request names, which is a known complaint). A request that
names no model goes to the slot's current default, which operators can change at runtime.

A slot's aliases (OminiX-API's family names: `qwen3`, `paraformer`, `flux`, ...) are the one
exception: each names an allowed model, or the slot's default (its target is `default` or not
allowed here), so an OminiX-API client's `"model": "qwen3"` is served and never reaches a model
outside the allow-list. Responses echo the model that served, not the alias.

The LLM slot's LoRA adapters are models too: each is routed by its name (which becomes the
request's multiplexed model id) and listed with the model it runs on as its `parent`. Those in
the config are known from the start; those an operator loads at run time are Control's, and the
ingress keeps its copy (`runtime_adapters`) current (deployments/ingress/serving/adapters.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from deployments.control.policy import check_model_allowed
from deployments.protocol.errors import APIError, model_not_found
from deployments.protocol.openai import ModelCard
from deployments.slot_types import SLOT_DEFAULT
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
    aliases: dict[str, str] = field(default_factory=dict)  # name (lower case) -> model id or "default"
    options: dict = field(default_factory=dict)  # what the slot's routes check first (the VLM's image limits)
    families: dict[str, list[str]] = field(default_factory=dict)  # OminiX family -> its allowed models
    adapters: dict[str, str] = field(default_factory=dict)  # configured LoRA adapters -> the model each runs on
    runtime_adapters: dict[str, str] = field(default_factory=dict)  # loaded at run time (Control's), the same

    def adapter_parent(self, name: str) -> Optional[str]:
        """The model the adapter `name` runs on; None when `name` is no adapter."""
        return self.runtime_adapters.get(name) or self.adapters.get(name)

    def all_adapters(self) -> dict[str, str]:
        return {**self.adapters, **self.runtime_adapters}

    @property
    def default(self) -> str:
        return self.models[0]

    def alias_target(self, name: str) -> Optional[str]:
        """The model an alias names (None: the slot's default); KeyError if `name` is no alias."""
        target = self.aliases[name.lower()]
        return target if target != SLOT_DEFAULT and target in self.models else None


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
        spec = self.slots[slot]
        if model not in spec.models and spec.adapter_parent(model) is not None:
            return model  # an adapter: its name is the multiplexed model id
        if model not in spec.models and model.lower() in spec.aliases:
            return spec.alias_target(model)
        self.check_loadable(slot, model, not_found=True)
        return model

    def canonical(self, slot: str, model: str) -> str:
        """The model id behind an alias (the configured default for a `default` one), else `model`."""
        spec = self.slots.get(slot)
        if spec is None or model in spec.models or model.lower() not in spec.aliases:
            return model
        return spec.alias_target(model) or spec.default

    def family(self, slot: str, family: str) -> str:
        """The model an OminiX-API family route (/v1/audio/tts/qwen3, ...) runs: an allowed
        model of that family, else 404 model_not_found. Never the slot's default in its stead:
        the route promises that family's behaviour (its voices, its cloning)."""
        if slot not in self.slots:
            raise slot_disabled(slot)
        spec = self.slots[slot]
        models = spec.families.get(family, [])
        if models:
            return models[0]
        raise APIError(
            404,
            f"No {family} model is configured in this graph, so this route is not served: the "
            f"{SLOTS[slot].label} slot allows {', '.join(spec.models)} (none is {family}). Allow one "
            f"(e.g. {slot}.models) and name it in {slot}.aliases.{family}, or use "
            f"{SLOTS[slot].routes[0].prefix} with any of those.",
            "invalid_request_error",
            "model",
            "model_not_found",
        )

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
        return [m for spec in self.slots.values() for m in [*spec.models, *spec.all_adapters()]]

    def taken(self, slot: str, name: str) -> bool:
        """Whether `name` already names a model, an alias or an adapter of the slot."""
        spec = self.slots[slot]
        return name in spec.models or name.lower() in spec.aliases or name in spec.all_adapters()

    def cards(self, loaded: dict[str, set[str]] | None = None) -> list[ModelCard]:
        """The models, then the aliases (with the model each names, as configured)."""
        loaded = loaded or {}
        ids = {
            slot: list(
                dict.fromkeys(
                    [*spec.models, *sorted(m for m in loaded.get(slot, ()) if spec.adapter_parent(m) is None)]
                )
            )
            for slot, spec in self.slots.items()
        }
        models = [
            ModelCard(id=m, type=slot, endpoints=SLOTS[slot].endpoints(), loaded=m in loaded.get(slot, set()))
            for slot, models in ids.items()
            for m in models
        ]
        models += [
            ModelCard(
                id=name,
                type=slot,
                endpoints=SLOTS[slot].endpoints(),
                loaded=name in loaded.get(slot, set()),
                parent=parent,
            )
            for slot, spec in self.slots.items()
            for name, parent in spec.all_adapters().items()
        ]
        aliases = [
            ModelCard(id=name, type=slot, endpoints=SLOTS[slot].endpoints(), alias_of=self.canonical(slot, name))
            for slot, spec in self.slots.items()
            for name in spec.aliases
            if name not in spec.models
        ]
        return models + aliases
