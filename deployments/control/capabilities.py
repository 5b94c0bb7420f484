"""The capability registry: which engine serves each slot category, its version, what it can do.

OminiX-API builds this from its engine crates' manifests; here an engine is the Python package a
slot drives (the `engine` of its `Slot`, which the caller passes in from the slot registry), and
its version is the installed distribution's. /v1/version shows the registry and the app manifest
(graphs/manifest.py) is checked against it at start-up. Only the categories of
slots that are enabled in this graph are available: an app that needs TTS cannot start on a
graph whose TTS slot is off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Optional

from deployments.slot_types import Slot


@dataclass(frozen=True)
class Category:
    """What a manifest can require of a category: its highest engine version, every capability."""

    version: str
    capabilities: frozenset[str]


def _installed_version(package: str) -> Optional[str]:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def registry(enabled_slots: Iterable[Slot]) -> dict[str, dict]:
    """engine name -> {name, version, category, description, capabilities}, for the enabled slots
    whose engine package is installed."""
    out = {}
    for slot in enabled_slots:
        engine = slot.engine
        installed = _installed_version(engine.package)
        if installed is not None:
            out[engine.name] = {
                "name": engine.name,
                "version": installed,
                "category": slot.name,
                "description": engine.description,
                "capabilities": list(engine.capabilities),
            }
    return out


def categories(entries: dict[str, dict]) -> dict[str, Category]:
    """Per category: capabilities unioned over its engines, the highest version among them."""
    from semantic_version import Version

    merged: dict[str, Category] = {}
    for entry in entries.values():
        current = merged.get(entry["category"])
        caps = frozenset(entry["capabilities"]) | (current.capabilities if current else frozenset())
        newest = entry["version"]
        if current and Version.coerce(current.version) > Version.coerce(newest):
            newest = current.version
        merged[entry["category"]] = Category(newest, caps)
    return merged
