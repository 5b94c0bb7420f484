"""What the ingress routers need from the running ingress replica: slot handles and the
model catalog. Routers get it as a FastAPI dependency, so they stay plain functions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.ingress.catalog import ModelCatalog
from deployments.ingress.config import IngressSettings
from deployments.ingress.metrics import IngressMetrics


@dataclass
class IngressState:
    catalog: ModelCatalog
    settings: IngressSettings = field(default_factory=IngressSettings)
    metrics: IngressMetrics = field(default_factory=IngressMetrics)
    control: Optional[Any] = None  # DeploymentHandle of the Control deployment
    llm: Optional[Any] = None  # DeploymentHandle of the LLM slot, when it is bound
    tts: Optional[Any] = None  # DeploymentHandle of the TTS slot, when it is bound
    asr: Optional[Any] = None  # DeploymentHandle of the ASR slot, when it is bound
    image: Optional[Any] = None  # DeploymentHandle of the image slot, when it is bound
    cuda: Optional[Any] = None  # DeploymentHandle of the CUDA proxy, when a route is configured
    cuda_models: frozenset[str] = frozenset()  # public ids routed to CUDA (exact match)

    def slot_handle(self, slot: str) -> Optional[Any]:
        return getattr(self, slot, None)


def ingress_state() -> IngressState:
    from ray import serve

    return serve.get_replica_context().servable_object.state
