"""The ingress's FastAPI application: error handling plus one router per API surface."""

from fastapi import FastAPI

from deployments import SERVICE_NAME, __version__
from deployments.ingress.errors import install_error_handlers
from deployments.ingress.routers import chat, completions, health, models
from deployments.ingress.routers import audio_speech, voices, ws_tts


def create_app() -> FastAPI:
    app = FastAPI(
        title=SERVICE_NAME,
        version=__version__,
        description="OpenAI-compatible MLX model server (Ray Serve graph)",
    )
    install_error_handlers(app)
    for router in (health.router, models.router, chat.router, completions.router):
        app.include_router(router)
    for router in (audio_speech.router, voices.router, ws_tts.router):
        app.include_router(router)
    return app
