"""The app manifest (`ominix.toml`, OminiX-API's format): what an app needs from the server.

    [app]
    name = "voice-bot"
    version = "0.2.0"
    ominix_api = ">=0.1.0"           # checked against ominix-serve's own version

    [requires]
    llm = ">=0.30"                   # a version requirement on the category's engine
    tts = { version = ">=0.2", capabilities = { streaming = true } }

Requirements use Cargo's syntax, as OminiX-API does (">=1.2, <2", "^1.2", "~1.2", "1.2" meaning
"^1.2"), evaluated by the `semantic_version` library. Every unmet requirement is collected, so
one start-up failure lists them all.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import semantic_version

from deployments.control.capabilities import Category


class ManifestError(ValueError):
    """The manifest cannot be read, or the server does not meet it: start-up must stop."""


@dataclass(frozen=True)
class Requirement:
    category: str
    version: str = ">=0.0.0"
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class AppManifest:
    path: str
    name: str
    version: str = ""
    ominix_api: str = ""
    requires: tuple[Requirement, ...] = field(default_factory=tuple)


def load_manifest(path: str | Path) -> AppManifest:
    path = Path(path).expanduser()
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as e:
        raise ManifestError(f"Failed to read manifest {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"Failed to parse manifest {path}: {e}") from None
    return parse_manifest(raw, str(path))


def parse_manifest(raw: dict[str, Any], path: str) -> AppManifest:
    app = raw.get("app")
    if not isinstance(app, dict) or not isinstance(app.get("name"), str) or not app["name"].strip():
        raise ManifestError(f"Failed to parse manifest {path}: [app] needs a non-empty name")
    requires = raw.get("requires", {})
    if not isinstance(requires, dict):
        raise ManifestError(f"Failed to parse manifest {path}: [requires] must be a table")
    problems, parsed = [], []
    for category, value in requires.items():
        try:
            parsed.append(_requirement(category, value))
        except ValueError as e:
            problems.append(str(e))
    for key in ("version", "ominix_api"):
        if not isinstance(app.get(key, ""), str):
            problems.append(f"[app] {key} must be a string")
    if problems:
        raise ManifestError(f"Failed to parse manifest {path}: " + "; ".join(problems))
    return AppManifest(path, app["name"], app.get("version", ""), app.get("ominix_api", ""), tuple(parsed))


def _requirement(category: str, value: Any) -> Requirement:
    if isinstance(value, str):
        return Requirement(category, _spec_text(value, category))
    if isinstance(value, dict):
        caps = value.get("capabilities", {})
        if not isinstance(caps, dict) or not all(isinstance(v, bool) for v in caps.values()):
            raise ValueError(f"requires.{category}.capabilities must be a table of true/false")
        version = value.get("version", ">=0.0.0")
        if not isinstance(version, str):
            raise ValueError(f"requires.{category}.version must be a string")
        return Requirement(category, _spec_text(version, category), tuple(k for k, v in caps.items() if v))
    raise ValueError(f"requires.{category} must be a version string or a table")


def _spec_text(requirement: str, where: str) -> str:
    """Validate a Cargo-style requirement (unlike OminiX-API, a malformed one is an error, not
    silently ignored: a typo must not turn a requirement off)."""
    try:
        _spec(requirement)
    except ValueError as e:
        raise ValueError(f"{where}: invalid version requirement {requirement!r} ({e})") from None
    return requirement


def _spec(requirement: str) -> semantic_version.SimpleSpec:
    # Cargo reads a bare version as a caret requirement and allows spaces after commas.
    clauses = [c.strip() for c in requirement.split(",") if c.strip()]
    clauses = ["^" + c if re.match(r"\d", c) else c for c in clauses]
    return semantic_version.SimpleSpec(",".join(clauses) or "*")


def _satisfies(version: str, requirement: str) -> bool:
    return _spec(requirement).match(semantic_version.Version.coerce(version))


def unmet_requirements(manifest: AppManifest, server_version: str, available: dict[str, Category]) -> list[str]:
    """Every way this server falls short of the manifest (empty: the app can run)."""
    problems = []
    if manifest.ominix_api and not _satisfies(server_version, manifest.ominix_api):
        problems.append(f"App requires ominix_api {manifest.ominix_api}, but server is {server_version}")
    for req in manifest.requires:
        category = available.get(req.category)
        if category is None:
            problems.append(f"Required capability '{req.category}' is not available (enabled: {sorted(available)})")
            continue
        if not _satisfies(category.version, req.version):
            problems.append(
                f"Capability '{req.category}' version {category.version} does not satisfy requirement {req.version}"
            )
        for cap in req.capabilities:
            if cap not in category.capabilities:
                problems.append(
                    f"Capability '{req.category}' does not support '{cap}' (available: {sorted(category.capabilities)})"
                )
    return problems


def check_manifest(path: Optional[str], server_version: str, available: dict[str, Category]) -> Optional[AppManifest]:
    """Load and check the manifest at `path` (None: no manifest); raise listing every problem."""
    if not path:
        return None
    manifest = load_manifest(path)
    problems = unmet_requirements(manifest, server_version, available)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise ManifestError(f"App '{manifest.name}' has {len(problems)} unsatisfied requirements:\n{listed}")
    return manifest
