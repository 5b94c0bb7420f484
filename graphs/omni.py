"""The ominix graph: ingress + one deployment per enabled model slot of the registry
(deployments/slots.py), Control, and the CUDA proxy when a route is configured.

`serve run serve_config.yaml` calls `build_app(args)`; slots that are turned off are not bound.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Optional

from ray.serve import Application

from deployments import __version__
from deployments.control.capabilities import categories, registry
from deployments.control.deployment import Control
from deployments.cuda_proxy.deployment import CudaProxy
from deployments.hub import ModelUnavailable, check_model_available
from deployments.ingress.deployment import Ingress
from deployments.ray_internals import serve_http_host
from deployments.slot_types import Slot
from deployments.slots import SLOTS
from graphs.config import GraphArgs
from graphs.manifest import check_manifest

logger = logging.getLogger("ray.serve")

HEALTH_CHECK_PERIOD_S = 10


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
    bind_host = serve_http_host()
    settings = config.ingress_settings(bind_host)
    logger.info(
        "Security mode: %s on %s; CORS origins %s; at most %d requests in flight per ingress replica",
        "API keys required" if settings.auth_required else "no API key (keyless)",
        bind_host or "an unknown host",
        settings.cors_origins or "none",
        settings.max_concurrent_requests,
    )
    # A fresh build id per build: a redeploy starts from the config, a Control restart does not.
    # Control's access log is off unless asked for: the replicas' polling is ~100 lines a minute.
    control = Control.options(**{**config.serve_options("Control"), **options.get("Control", {})}).bind(
        config.defaults(),
        {name: SLOTS[name].deployment_name for name in config.slots()},
        uuid.uuid4().hex,
        cache_dir=config.cache_dir,
    )
    slots = {
        name: bind_slot(
            SLOTS[name],
            slot_config,
            config.cache_dir,
            control,
            options,
            config.serve_options(SLOTS[name].deployment_name),
        )
        for name, slot_config in config.slots().items()
    }
    cuda = {}
    if cuda_route is not None:
        proxy = CudaProxy.options(**config.serve_options("CudaProxy"))
        cuda = {"cuda": proxy.bind(cuda_route), "cuda_models": list(cuda_route.models)}
    ingress = Ingress.options(**{**config.serve_options("Ingress"), **options.get("Ingress", {})})
    return ingress.bind(config.catalog(), settings.model_dump(), control=control, slots=slots, **cuda)


def bind_slot(
    slot: Slot,
    slot_config,
    cache_dir: Optional[str],
    control,
    options: dict[str, dict],
    common: Optional[dict[str, Any]] = None,
):
    """One slot's deployment, bound with its Serve options: the ones its config decides
    (slot_options) and the common args' (`common`: logging) under the caller's (tests, benchmarks;
    serve_config.yaml's `deployments:` block is applied by Serve on top of all)."""
    own = {**slot_options(slot, slot_config), **(common or {})}
    deployment = slot.deployment_class().options(**{**own, **options.get(slot.deployment_name, {})})
    return deployment.bind(slot_config.model_dump(), cache_dir=cache_dir, control=control)


def slot_options(slot: Slot, slot_config) -> dict[str, Any]:
    """The Serve options a slot's config decides, derived here only, so the deployment, its
    config and serve_config.yaml cannot disagree (serve_config.yaml leaves max_ongoing_requests
    out; it repeats the registry's replica resources, which users edit there)."""
    return {
        "name": slot.deployment_name,
        "max_ongoing_requests": slot_config.max_ongoing_requests(),
        "health_check_period_s": HEALTH_CHECK_PERIOD_S,
        "graceful_shutdown_timeout_s": slot.drain_timeout_s(),
        "ray_actor_options": dict(slot.replica_resources),
        **slot_config.placement_options(slot.replica_resources),
    }


def check_app_manifest(config: GraphArgs) -> None:
    """Stop start-up (ManifestError listing every problem) when the app manifest is not met."""
    manifest = check_manifest(config.manifest, __version__, categories(registry(SLOTS[n] for n in config.slots())))
    if manifest is not None:
        logger.info(
            "App manifest %s: '%s' %s, all %d requirements met",
            manifest.path,
            manifest.name,
            manifest.version,
            len(manifest.requires),
        )


def _check_models(config: GraphArgs) -> None:
    """Fail start-up, naming the slot, when a default model is neither built in, local nor reachable."""
    for name, slot_config in config.slots().items():
        slot = SLOTS[name]
        try:
            check_model_available(slot_config.default_model, builtins=slot.builtins, root_file=slot.repo_root_file)
        except ModelUnavailable as e:
            logger.error("%s slot: %s", slot.label, e)
            raise ModelUnavailable(f"{slot.label} slot cannot start: {e}") from None
