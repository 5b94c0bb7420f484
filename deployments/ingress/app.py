"""The ingress's FastAPI application: error handling plus one router per API surface."""

from fastapi import FastAPI

from deployments import SERVICE_NAME, __version__
from deployments.ingress.config import IngressSettings
from deployments.ingress.errors import install_error_handlers
from deployments.ingress.middleware import (
    ApiKeyAuth,
    BodySizeLimit,
    ConcurrencyLimit,
    DynamicCORS,
    RouteTimeout,
)
from deployments.ingress.metrics import RequestMetrics
from deployments.ingress.routers import (
    audio_speech,
    audio_transcriptions,
    chat,
    completions,
    health,
    images,
    metrics,
    model_admin,
    models,
    voices,
    ws_tts,
)
from deployments.ingress.state import ingress_state


def _replica_settings() -> IngressSettings:
    return ingress_state().settings


def create_app(settings=_replica_settings) -> FastAPI:
    """`settings` is looked up per request, so one app object serves any bound configuration."""
    app = FastAPI(
        title=SERVICE_NAME,
        version=__version__,
        description="OpenAI-compatible MLX model server (Ray Serve graph)",
    )
    install_error_handlers(app)
    # model_admin before models: /v1/models/status must not match /v1/models/{model_id}.
    for router in (health.router, model_admin.router, models.router, chat.router, completions.router, metrics.router):
        app.include_router(router)
    for router in (audio_transcriptions.router, audio_speech.router, voices.router, ws_tts.router):
        app.include_router(router)
    app.include_router(images.router)
    # Added last = runs first: metrics, CORS, auth, the cap, body size, timeout, the routes.
    for middleware in (RouteTimeout, BodySizeLimit, ConcurrencyLimit, ApiKeyAuth, DynamicCORS):
        app.add_middleware(middleware, settings=settings)
    app.add_middleware(RequestMetrics, metrics=lambda: ingress_state().metrics)
    return app
