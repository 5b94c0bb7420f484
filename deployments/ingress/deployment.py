"""The ingress as a Ray Serve deployment: the FastAPI app over clients of the slot handles.

The graph builder binds it with one handle per enabled slot (a dict keyed by slot name, from
the registry in deployments/slots.py); the app is built per replica (`__serve_build_asgi_app__`)
around this replica's state, so nothing reaches into Serve's replica context per request.
"""

from __future__ import annotations

import logging
from typing import Optional

from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.ingress.app import create_app
from deployments.ingress.catalog import ModelCatalog
from deployments.ingress.clients import DeploymentClient, SlotClient
from deployments.ingress.config import IngressSettings
from deployments.ingress.state import IngressState
from deployments.resources import reserve
from deployments.slots import SLOTS
from deployments.system_deps import replica_warnings

logger = logging.getLogger("ray.serve")
INGRESS_TOOLS = ("ffmpeg",)


@serve.deployment(name="Ingress", max_ongoing_requests=256, ray_actor_options=reserve(0.1, 256))
@serve.ingress()
class Ingress:
    def __init__(
        self,
        catalog: dict[str, dict],
        settings: Optional[dict] = None,
        control: Optional[DeploymentHandle] = None,
        slots: Optional[dict[str, DeploymentHandle]] = None,
        cuda: Optional[DeploymentHandle] = None,
        cuda_models: tuple[str, ...] = (),
    ):
        self.state = IngressState(
            catalog=ModelCatalog.from_config(catalog),
            settings=IngressSettings.model_validate(settings or {}),
            slots={name: SlotClient(SLOTS[name], handle) for name, handle in (slots or {}).items()},
            control=DeploymentClient(control) if control is not None else None,
            cuda=DeploymentClient(cuda) if cuda is not None else None,
            cuda_models=frozenset(cuda_models),
        )
        # TTS's `aac` and the reference clips of cloning and voice training go through ffmpeg here.
        self.state.system_warnings = replica_warnings(INGRESS_TOOLS if "tts" in (slots or {}) else ())
        for line in self.state.system_warnings:
            logger.warning("Ingress: %s", line)
        logger.info("Ingress serving models: %s", catalog)
        if cuda is not None:
            logger.info("Ingress routes to CUDA: %s", sorted(cuda_models))

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.state)
