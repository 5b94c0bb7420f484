"""The ingress's FastAPI application: error handling plus one router per API surface."""

from fastapi import FastAPI

from deployments import SERVICE_NAME, __version__
from deployments.ingress.errors import install_error_handlers
from deployments.ingress.routers import audio_transcriptions, chat, completions, health, models


def create_app() -> FastAPI:
    app = FastAPI(
        title=SERVICE_NAME,
        version=__version__,
        description="OpenAI-compatible MLX model server (Ray Serve graph)",
    )
    install_error_handlers(app)
    for router in (health.router, models.router, chat.router, completions.router):
        app.include_router(router)
    app.include_router(audio_transcriptions.router)
    return app
