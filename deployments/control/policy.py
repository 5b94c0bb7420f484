"""Which models an operator or a request may load into a slot.

Allowed: the ids the slot's config allows (`SlotModelsConfig.allowed_models()`,
deployments/slot_types.py), and local paths inside the slot's configured models directory.
Anything else is refused (403) before a replica touches the disk or the hub; a path that tries
to climb out (`..`, an absolute path elsewhere) is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from deployments.protocol.errors import APIError


def check_model_allowed(model: str, allowed_ids: Sequence[str], models_dir: Optional[str], slot: str) -> None:
    if model in allowed_ids:
        return
    if ".." in Path(model).parts or "\x00" in model:
        raise APIError(400, "Model path contains invalid directory traversal", "invalid_request_error", "model")
    if models_dir and _is_inside(model, models_dir):
        return
    if Path(model).is_absolute() or model.startswith("~"):
        raise APIError(
            400, f"Model path '{model}' is outside the allowed models directory", "invalid_request_error", "model"
        )
    raise APIError(
        403,
        f"Model '{model}' is not allowed for slot '{slot}' by server configuration",
        "forbidden",
        "model",
        "model_not_allowed",
    )


def _is_inside(model: str, models_dir: str) -> bool:
    root = Path(models_dir).expanduser().resolve()
    candidate = Path(model).expanduser()
    candidate = (candidate if candidate.is_absolute() else root / candidate).resolve()
    return candidate.is_relative_to(root) and candidate.is_dir()
