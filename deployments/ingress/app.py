"""The ingress's FastAPI application: error handling plus one router per API surface."""

from fastapi import FastAPI

from deployments import SERVICE_NAME, __version__
from deployments.ingress.errors import install_error_handlers
from deployments.ingress.routers import chat, completions, health, models, readiness


def create_app() -> FastAPI:
    app = FastAPI(
        title=SERVICE_NAME,
        version=__version__,
        description="OpenAI-compatible MLX model server (Ray Serve graph)",
    )
    install_error_handlers(app)
    # readiness before models: /v1/models/status must win over /v1/models/{model_id:path}
    for router in (health.router, readiness.router, models.router, chat.router, completions.router):
        app.include_router(router)
    return app
