"""The ingress as a Ray Serve deployment: the FastAPI app plus handles to the slots."""

from __future__ import annotations

import logging
from typing import Optional

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.ingress.app import create_app
from deployments.ingress.catalog import ModelCatalog
from deployments.ingress.config import IngressSettings
from deployments.ingress.state import IngressState
from deployments.resources import reserve

logger = logging.getLogger("ray.serve")

app = create_app()


@serve.deployment(name="Ingress", max_ongoing_requests=256, ray_actor_options=reserve(0.1, 256))
@serve.ingress(app)
class Ingress:
    def __init__(
        self,
        catalog: dict[str, dict],
        settings: Optional[dict] = None,
        control: Optional[DeploymentHandle] = None,
        llm: Optional[DeploymentHandle] = None,
        asr: Optional[DeploymentHandle] = None,
        tts: Optional[DeploymentHandle] = None,
        image: Optional[DeploymentHandle] = None,
        cuda: Optional[DeploymentHandle] = None,
        cuda_models: tuple[str, ...] = (),
    ):
        self.state = IngressState(
            catalog=ModelCatalog.from_config(catalog),
            settings=IngressSettings.model_validate(settings or {}),
            control=control,
            llm=llm,
            asr=asr,
            tts=tts,
            image=image,
            cuda=cuda,
            cuda_models=frozenset(cuda_models),
        )
        logger.info("Ingress serving models: %s", catalog)
        if cuda is not None:
            logger.info("Ingress routes to CUDA: %s", sorted(cuda_models))
