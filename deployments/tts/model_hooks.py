"""What particular TTS model types need around mlx-audio's generic load and generate.

The TTS engine loads every model with `mlx_audio.tts.utils.load_model` and calls its
`generate`; these hooks add the few model-specific steps, so the engine stays generic:
- every model: the CPU convolution kernels (deployments/kernels), installed before the model
  is built, on MLX's CPU backend only (`OMINIX_CPU_KERNELS` switches them);
- Kokoro: its fused AdaIN + Snake kernels (deployments/kernels/kokoro.py); misaki's English G2P made offline (spaCy model alias), built at load time so a
  broken G2P fails the load rather than the first request; the language of a request (or of the
  voice: `bf_emma` is British English) chosen for its G2P; languages whose G2P is not installed
  are 400s.

No Ray here; MLX only through the kernels, imported when a model loads.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, Optional

from deployments.protocol.errors import invalid_request

# Kokoro's language codes (mlx-audio's KokoroPipeline) and the names it accepts for them.
KOKORO_LANGUAGES = {
    "a": "American English",
    "b": "British English",
    "e": "Spanish",
    "f": "French",
    "h": "Hindi",
    "i": "Italian",
    "p": "Brazilian Portuguese",
    "j": "Japanese",
    "z": "Mandarin Chinese",
}
KOKORO_ALIASES = {
    "en": "a",
    "en-us": "a",
    "en-gb": "b",
    "es": "e",
    "fr": "f",
    "fr-fr": "f",
    "hi": "h",
    "it": "i",
    "pt": "p",
    "pt-br": "p",
    "ja": "j",
    "zh": "z",
}
# Japanese and Chinese G2P need misaki's extras (not installed by default): module to probe.
_EXTRA_G2P = {"j": ("pyopenjtalk", "misaki[ja]"), "z": ("jieba", "misaki[zh]")}


def model_type(model_dir: Path) -> str:
    try:
        return json.loads((model_dir / "config.json").read_text()).get("model_type", "")
    except (OSError, ValueError):
        return ""


def before_load(model_dir: Path) -> None:
    from deployments.kernels import install_cpu_kernels

    install_cpu_kernels()  # before the model is built: some keep references to the ops
    if model_type(model_dir) == "kokoro":
        from deployments.kernels import is_enabled, kokoro

        if is_enabled("kokoro"):
            kokoro.install()  # fused AdaIN + Snake (CPU backend only)
        from deployments.hub import default_cache_dir
        from deployments.tts.kokoro import prepare_g2p

        prepare_g2p(default_cache_dir())


def after_load(model: Any, model_type_name: str) -> None:
    if model_type_name == "kokoro":
        model._get_pipeline("a")  # mlx-audio builds (and caches) the G2P on first use


def kokoro_lang_code(language: Optional[str], voice: Optional[str]) -> str:
    """The G2P language: the request's, else the voice's (its first letter), else American English."""
    if language:
        code = language.strip().lower()
        return KOKORO_ALIASES.get(code, code)
    if voice and voice[:1] in KOKORO_LANGUAGES and voice[:1] not in _EXTRA_G2P:
        return voice[0]
    return "a"  # e.g. a Japanese voice reading with the English G2P


def check_kokoro_language(model_id: str, language: Optional[str]) -> None:
    if not language:
        return
    code = kokoro_lang_code(language, None)
    if code not in KOKORO_LANGUAGES:
        names = ", ".join(f"{c} ({n})" for c, n in KOKORO_LANGUAGES.items())
        raise invalid_request(
            f"Model '{model_id}' (kokoro) does not speak '{language}'; languages: {names}", "language"
        )
    probe, extra = _EXTRA_G2P.get(code, (None, None))
    if probe and importlib.util.find_spec(probe) is None:
        raise invalid_request(
            f"Model '{model_id}' (kokoro): {KOKORO_LANGUAGES[code]} needs the G2P package {extra}, "
            "which this server does not have installed",
            "language",
        )


# Kokoro's default voice (hexgrad's own first choice, its best-rated American English voice):
# requests without a voice and GET /v1/voices' default_voice use it, not the alphabetical first.
KOKORO_DEFAULT_VOICE = "af_heart"
# OpenAI's voice names -> Kokoro presets, so OpenAI clients' `voice="alloy"` speaks: the Kokoro
# voice of the same name where there is one (alloy, echo, fable, nova, onyx), else one of the
# same gender and register (OpenAI's own descriptions: ash, ballad, verse male; coral, sage,
# shimmer female).
KOKORO_OPENAI_VOICES = {
    "alloy": "af_alloy",
    "ash": "am_adam",
    "ballad": "bm_george",
    "coral": "af_bella",
    "echo": "am_echo",
    "fable": "bm_fable",
    "nova": "af_nova",
    "onyx": "am_onyx",
    "sage": "af_sarah",
    "shimmer": "af_sky",
    "verse": "am_michael",
}


def default_preset(model_type_name: str, presets: list[str]) -> Optional[str]:
    """The preset a request without a voice gets (None: the first preset)."""
    if model_type_name == "kokoro" and KOKORO_DEFAULT_VOICE in presets:
        return KOKORO_DEFAULT_VOICE
    return None


def preset_aliases(model_type_name: str, presets: list[str]) -> dict[str, str]:
    """Other names requests may use for the model's presets (alias -> preset)."""
    if model_type_name != "kokoro":
        return {}
    return {alias: preset for alias, preset in KOKORO_OPENAI_VOICES.items() if preset in presets}
