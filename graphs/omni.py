"""The ominix graph: ingress + one deployment per enabled model slot.

`serve run serve_config.yaml` calls `build_app(args)`; slots that are turned off are not bound.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Optional

from ray.serve import Application

from deployments import __version__
from deployments.asr.deployment import BUILTIN_ASR_MODELS, ASRSlot
from deployments.control.capabilities import categories, registry
from deployments.control.deployment import Control
from deployments.cuda_proxy.deployment import CudaProxy
from deployments.hub import ModelUnavailable, check_model_available, looks_like_repo_id
from deployments.image.deployment import BUILTIN_IMAGE_MODELS, ImageSlot
from deployments.ingress.deployment import Ingress
from deployments.llm.deployment import BUILTIN_LLMS, LLMSlot
from deployments.tts.deployment import BUILTIN_TTS, TTSSlot
from graphs.config import GraphArgs
from graphs.manifest import check_manifest

logger = logging.getLogger("ray.serve")


def build_app(args: dict[str, Any] | None = None) -> Application:
    """The builder `serve run serve_config.yaml` calls with the application's args."""
    return build_graph(GraphArgs.from_args(args))


def build_graph(config: GraphArgs, options: dict[str, dict] | None = None) -> Application:
    """`options` (deployment name -> Serve options) is for programmatic use (tests, benchmarks);
    serve_config.yaml sets the same through its `deployments:` block."""
    options = options or {}
    check_app_manifest(config)
    cuda_route = config.cuda_route()  # an invalid route stops start-up: never silently local
    if config.check_models:
        _check_models(config)
    bind_host = _serve_http_host()
    settings = config.ingress_settings(bind_host)
    logger.info(
        "Security mode: %s on %s; CORS origins %s; at most %d requests in flight per ingress replica",
        "API keys required" if settings.auth_required else "no API key (keyless)",
        bind_host or "an unknown host",
        settings.cors_origins or "none",
        settings.max_concurrent_requests,
    )
    # A fresh build id per build: a redeploy starts from the config, a Control restart does not.
    control = Control.options(**options.get("Control", {})).bind(config.defaults(), uuid.uuid4().hex)
    llm = None
    if config.llm.enabled:
        llm = LLMSlot.options(**options.get("LLM", {})).bind(
            config.llm.model_dump(), cache_dir=config.cache_dir, control=control
        )
    asr = None
    if config.asr.enabled:
        asr = ASRSlot.options(**options.get("ASR", {})).bind(
            config.asr.model_dump(), cache_dir=config.cache_dir, control=control
        )
    tts = None
    if config.tts.enabled:
        tts = TTSSlot.options(**options.get("TTS", {})).bind(
            config.tts.model_dump(), cache_dir=config.cache_dir, control=control
        )
    image = None
    if config.image.enabled:
        image = ImageSlot.options(**options.get("Image", {})).bind(
            config.image.model_dump(), cache_dir=config.cache_dir, control=control
        )
    cuda = {}
    if cuda_route is not None:
        cuda = {"cuda": CudaProxy.bind(cuda_route), "cuda_models": list(cuda_route.models)}
    ingress = Ingress.options(**options.get("Ingress", {}))
    return ingress.bind(
        config.catalog(), settings.model_dump(), control=control, llm=llm, asr=asr, tts=tts, image=image, **cuda
    )


def check_app_manifest(config: GraphArgs) -> None:
    """Stop start-up (ManifestError listing every problem) when the app manifest is not met."""
    manifest = check_manifest(config.manifest, __version__, categories(registry(config.slots())))
    if manifest is not None:
        logger.info("App manifest %s: '%s' %s, all %d requirements met",
                    manifest.path, manifest.name, manifest.version, len(manifest.requires))


def _serve_http_host() -> Optional[str]:
    """The host Serve's HTTP proxy binds (http_options.host), or None if it cannot be read."""
    try:
        import ray
        from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

        controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
        return ray.get(controller.get_http_config.remote(), timeout=10).host
    except Exception as e:  # not inside a Serve cluster (unit tests, `serve build`)
        logger.debug("Could not read Serve's HTTP host: %s", e)
        return None


BUILTIN_MODELS = {"llm": BUILTIN_LLMS, "asr": BUILTIN_ASR_MODELS, "tts": BUILTIN_TTS, "image": BUILTIN_IMAGE_MODELS}


def _check_models(config: GraphArgs) -> None:
    """Fail start-up, naming the slot, when a default model is neither built in, local nor reachable."""
    for slot, slot_config in config.slots().items():
        if slot == "image" and _cached_diffusers_repo(slot_config.default_model):
            continue
        try:
            check_model_available(slot_config.default_model, builtins=BUILTIN_MODELS[slot])
        except ModelUnavailable as e:
            logger.error("%s slot: %s", slot.upper(), e)
            raise ModelUnavailable(f"{slot.upper()} slot cannot start: {e}") from None


def _cached_diffusers_repo(model: str) -> bool:
    """Diffusers-layout repos (FLUX.2-klein, Z-Image) keep model_index.json at their root, not
    the config.json the shared check looks for in the cache."""
    if not looks_like_repo_id(model):
        return False
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(model, "model_index.json"), str)
