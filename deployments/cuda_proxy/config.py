"""Configuration of the CUDA route: the six OMINIX_V0_* settings, from graph args or environment.

Every rule fails start-up with a message naming the variable, because a half-configured route
must never silently fall back to local models (fail closed). The graph args (`cuda:` block)
carry the same six values; an environment variable that is set overrides its arg
(deployments/env.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Union
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from deployments.env import ConfigError, clean_text

URL_VAR = "OMINIX_V0_SCHEDULER_URL"
TOKEN_VAR = "OMINIX_V0_SCHEDULER_TOKEN"
MODELS_VAR = "OMINIX_V0_SCHEDULER_MODELS"
SERVED_VAR = "OMINIX_V0_SERVED_MODEL"
TIMEOUT_VAR = "OMINIX_V0_SCHEDULER_TIMEOUT_SECS"
KWARGS_VAR = "OMINIX_V0_CHAT_TEMPLATE_KWARGS_JSON"
REQUIRED_VARS = (URL_VAR, TOKEN_VAR, MODELS_VAR, SERVED_VAR)

DEFAULT_TIMEOUT_S = 1800
MAX_TIMEOUT_S = 86400
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# A header value we can send as-is: visible ASCII, space and tab (no CR/LF/NUL, no controls).
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


class CudaConfigError(ConfigError):
    """The CUDA route is configured wrongly; start-up must stop."""


@dataclass(frozen=True)
class CudaRoute:
    """A validated route: which public ids go to which shim, and how to talk to it."""

    base_url: str
    token: str = field(repr=False)
    models: tuple[str, ...]
    served_model: str
    timeout_s: int = DEFAULT_TIMEOUT_S
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


class CudaArgs(BaseModel):
    """The `cuda:` block of the graph args; each field is one OMINIX_V0_* variable."""

    model_config = ConfigDict(extra="forbid")

    scheduler_url: Optional[str] = None
    scheduler_token: Optional[str] = None
    scheduler_models: Union[str, list[str], None] = None
    served_model: Optional[str] = None
    scheduler_timeout_secs: Union[int, str, None] = None
    chat_template_kwargs: Union[dict[str, Any], str, None] = None

    def settings(self) -> dict[str, Optional[str]]:
        """Variable name -> raw text (None when absent), as the environment would carry it."""
        raw: dict[str, Optional[str]] = {}
        for name, var in ARG_VARS.items():
            value = getattr(self, name)
            if isinstance(value, list):
                value = ",".join(value)
            elif isinstance(value, dict):
                value = json.dumps(value)
            elif isinstance(value, int):
                value = str(value)
            raw[var] = value
        return raw

    def route(self) -> Optional[CudaRoute]:
        return parse_route(self.settings())


ARG_VARS = {
    "scheduler_url": URL_VAR,
    "scheduler_token": TOKEN_VAR,
    "scheduler_models": MODELS_VAR,
    "served_model": SERVED_VAR,
    "scheduler_timeout_secs": TIMEOUT_VAR,
    "chat_template_kwargs": KWARGS_VAR,
}


def parse_route(raw: Mapping[str, Optional[str]]) -> Optional[CudaRoute]:
    """The route the six settings describe; None when none is present (routing disabled)."""
    present = {var: value for var, value in raw.items() if value is not None}
    if not present:
        return None
    values = {var: _clean(var, value) for var, value in present.items()}
    missing = [var for var in REQUIRED_VARS if var not in values]
    if missing:
        raise CudaConfigError(
            f"{missing[0]} is required when OminiX-SGLang routing is configured "
            f"(set all of {', '.join(REQUIRED_VARS)}, or none of the OMINIX_V0_* variables)"
        )
    return CudaRoute(
        base_url=_base_url(values[URL_VAR]),
        token=_token(values[TOKEN_VAR]),
        models=_models(values[MODELS_VAR]),
        served_model=_served_model(values[SERVED_VAR]),
        timeout_s=_timeout(values.get(TIMEOUT_VAR)),
        chat_template_kwargs=_kwargs(values.get(KWARGS_VAR)),
    )


def check_no_collision(route: CudaRoute, local_llm_ids: list[str]) -> None:
    """A mapped id must never also be a local model: one backend per id."""
    for model in route.models:
        if model in local_llm_ids:
            raise CudaConfigError(
                f"LLM_MODEL collides with an exact OminiX-SGLang route; configure one backend for model {model}"
            )


def _clean(var: str, value: str) -> str:
    return clean_text(var, value, CudaConfigError)


def _base_url(value: str) -> str:
    try:
        parts = urlsplit(value)
        host = parts.hostname
        _ = parts.port  # raises on a malformed port
    except ValueError as e:
        raise CudaConfigError(f"{URL_VAR} must be a valid URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise CudaConfigError(f"{URL_VAR} must use http or https")
    if not host:
        raise CudaConfigError(f"{URL_VAR} must name a host")
    if parts.username is not None or parts.password is not None:
        raise CudaConfigError(f"{URL_VAR} must not embed credentials; use {TOKEN_VAR}")
    if "?" in value or "#" in value:
        raise CudaConfigError(f"{URL_VAR} must not have a query or fragment")
    if parts.path not in ("", "/"):
        raise CudaConfigError(f"{URL_VAR} must be the shim base URL without a path")
    if parts.scheme == "http" and host not in LOOPBACK_HOSTS:
        raise CudaConfigError(f"{URL_VAR} may use plaintext HTTP only on loopback; use HTTPS for a remote worker")
    return f"{parts.scheme}://{parts.netloc}"


def _token(value: str) -> str:
    if not _HEADER_VALUE.fullmatch(value):
        raise CudaConfigError(f"{TOKEN_VAR} must be a valid HTTP header value")
    return value


def _models(value: str) -> tuple[str, ...]:
    models = [m.strip() for m in value.split(",") if m.strip()]
    if not models:
        raise CudaConfigError(f"{MODELS_VAR} must contain at least one exact model id")
    if any("*" in m for m in models):
        raise CudaConfigError(f"{MODELS_VAR} does not accept wildcards; list exact model ids")
    return tuple(dict.fromkeys(models))


def _served_model(value: str) -> str:
    if "," in value:
        raise CudaConfigError(f"{SERVED_VAR} must contain one exact served model id")
    return value


def _timeout(value: Optional[str]) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_S
    if not re.fullmatch(r"\+?[0-9]+", value):
        raise CudaConfigError(f"{TIMEOUT_VAR} must be a positive integer")
    seconds = int(value)
    if not 1 <= seconds <= MAX_TIMEOUT_S:
        raise CudaConfigError(f"{TIMEOUT_VAR} must be between 1 and {MAX_TIMEOUT_S} seconds")
    return seconds


def _kwargs(value: Optional[str]) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as e:
        raise CudaConfigError(f"{KWARGS_VAR} must be a JSON object: {e}") from None
    if not isinstance(parsed, dict):
        raise CudaConfigError(f"{KWARGS_VAR} must be a JSON object: got {type(parsed).__name__}")
    return parsed
