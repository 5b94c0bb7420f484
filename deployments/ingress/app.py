"""The ingress's FastAPI application: error handling, the safety middleware, one router per
API surface. `create_app(state)` is the whole ingress without Ray: the Ingress deployment
builds it with real deployment clients, tests build it with fakes (tests/ingress/)."""

from fastapi import FastAPI

from deployments import SERVICE_NAME, __version__
from deployments.ingress.errors import install_error_handlers
from deployments.ingress.metrics import RequestMetrics
from deployments.ingress.middleware import (
    ApiKeyAuth,
    BodySizeLimit,
    ConcurrencyLimit,
    DynamicCORS,
    RouteTimeout,
)
from deployments.ingress.routers import (
    agent,
    audio_diarization,
    audio_families,
    audio_speech,
    audio_stream,
    audio_transcriptions,
    chat,
    completions,
    conversations,
    embeddings,
    health,
    images,
    lora_adapters,
    messages,
    metrics,
    model_admin,
    model_catalog,
    models,
    pages,
    realtime,
    responses,
    vlm,
    voice_training,
    voices,
    ws_tts,
)
from deployments.ingress.state import IngressState

# model_admin and model_catalog before models: /v1/models/status must not match /v1/models/{model_id}.
ROUTERS = (
    health,
    model_admin,
    model_catalog,
    models,
    lora_adapters,
    chat,
    completions,
    responses,
    conversations,
    messages,
    metrics,
    audio_transcriptions,
    audio_diarization,
    audio_stream,
    audio_speech,
    audio_families,
    voice_training,
    voices,
    ws_tts,
    realtime,
    images,
    embeddings,
    vlm,
    agent,
    pages,
)


def create_app(state: IngressState) -> FastAPI:
    app = FastAPI(
        title=SERVICE_NAME,
        version=__version__,
        description="OpenAI-compatible MLX model server (Ray Serve graph)",
        docs_url=None,  # served offline by the pages router instead of from a CDN
        redoc_url=None,
    )
    app.state.ingress = state
    install_error_handlers(app)
    for module in ROUTERS:
        app.include_router(module.router)
    pages.with_bearer_auth(app)

    def settings():
        return app.state.ingress.settings

    # Added last = runs first: metrics, CORS, auth, the cap, body size, timeout, the routes.
    for middleware in (RouteTimeout, BodySizeLimit, ConcurrencyLimit, ApiKeyAuth, DynamicCORS):
        app.add_middleware(middleware, settings=settings)
    app.add_middleware(RequestMetrics, metrics=lambda: app.state.ingress.metrics)
    return app
