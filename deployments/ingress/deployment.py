"""The ingress as a Ray Serve deployment: the FastAPI app plus handles to the slots."""

from __future__ import annotations

import logging
from typing import Optional

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.ingress.app import create_app
from deployments.ingress.catalog import ModelCatalog
from deployments.ingress.state import IngressState

logger = logging.getLogger("ray.serve")

app = create_app()


@serve.deployment(name="Ingress", max_ongoing_requests=256)
@serve.ingress(app)
class Ingress:
    def __init__(
        self,
        catalog: dict[str, list[str]],
        llm: Optional[DeploymentHandle] = None,
        tts: Optional[DeploymentHandle] = None,
    ):
        self.state = IngressState(catalog=ModelCatalog(catalog), llm=llm, tts=tts)
        logger.info("Ingress serving models: %s", catalog)
