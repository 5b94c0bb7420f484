"""What the ingress routers need from the running ingress replica: slot handles and the
model catalog. Routers get it as a FastAPI dependency, so they stay plain functions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from deployments.ingress.catalog import ModelCatalog


@dataclass
class IngressState:
    catalog: ModelCatalog
    llm: Optional[Any] = None  # DeploymentHandle of the LLM slot, when it is bound
    tts: Optional[Any] = None  # DeploymentHandle of the TTS slot, when it is bound


def ingress_state() -> IngressState:
    from ray import serve

    return serve.get_replica_context().servable_object.state
