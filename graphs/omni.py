"""The ominix graph: ingress + one deployment per enabled model slot.

`serve run serve_config.yaml` calls `build_app(args)`; slots that are turned off are not bound.
"""

from __future__ import annotations

import logging
from typing import Any

from ray.serve import Application

from deployments.hub import ModelUnavailable, check_model_available
from deployments.ingress.deployment import Ingress
from deployments.llm.deployment import BUILTIN_LLMS, LLMSlot
from deployments.tts.deployment import BUILTIN_TTS, TTSSlot
from graphs.config import GraphArgs

logger = logging.getLogger("ray.serve")


def build_app(args: dict[str, Any] | None = None) -> Application:
    config = GraphArgs.from_args(args)
    if config.check_models:
        _check_models(config)
        _check_tts_model(config)
    llm = None
    if config.llm.enabled:
        llm = LLMSlot.bind(config.llm.model_dump(), cache_dir=config.cache_dir)
    tts = None
    if config.tts.enabled:
        tts = TTSSlot.bind(config.tts.model_dump(), cache_dir=config.cache_dir)
    return Ingress.bind(config.catalog(), llm=llm, tts=tts)


def _check_models(config: GraphArgs) -> None:
    if not config.llm.enabled:
        return
    try:
        check_model_available(config.llm.default_model, builtins=BUILTIN_LLMS)
    except ModelUnavailable as e:
        logger.error("LLM slot: %s", e)
        raise ModelUnavailable(f"LLM slot cannot start: {e}") from None


def _check_tts_model(config: GraphArgs) -> None:
    if not config.tts.enabled:
        return
    try:
        check_model_available(config.tts.default_model, builtins=BUILTIN_TTS)
    except ModelUnavailable as e:
        logger.error("TTS slot: %s", e)
        raise ModelUnavailable(f"TTS slot cannot start: {e}") from None
