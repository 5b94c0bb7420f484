"""What particular TTS model types need around mlx-audio's generic load and generate.

The TTS engine loads every model with `mlx_audio.tts.utils.load_model` and calls its
`generate`; these hooks add the few model-specific steps, so the engine stays generic:
- every model: the CPU convolution kernels (deployments/kernels), installed before the model
  is built, on MLX's CPU backend only (`OMINIX_CPU_KERNELS` switches them);
- Kokoro: its fused AdaIN + Snake kernels (deployments/kernels/kokoro.py); misaki's English G2P made offline (spaCy model alias), built at load time so a
  broken G2P fails the load rather than the first request; the language of a request (or of the
  voice: `bf_emma` is British English) chosen for its G2P; languages whose G2P is not installed
  are 400s;
- voice training's cached conditioning (`cached_voice`): pocket_tts and Kokoro load a
  .safetensors voice by path; Qwen3-TTS Base (`qwen3_tts_conditioning`, `qwen3_tts_cached_voice`)
  has no such entry point, so its x-vector and reference codes are served from the cache by a
  narrow wrapper around one synthesis.

No Ray here; MLX only through the kernels and these hooks, imported when a model loads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np

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


def check_word_timings(model_id: str, model_type_name: str, language: Optional[str], voice: Optional[str]) -> None:
    """400 unless the synthesis can time its words: Kokoro's English G2P gives each word its
    phonemes, and the duration predictor their frames; no other model here says when a word is."""
    if model_type_name != "kokoro":
        raise invalid_request(
            f"Model '{model_id}' ({model_type_name}) cannot time its words; word timestamps come from Kokoro",
            "return_timestamps",
        )
    if kokoro_lang_code(language, voice) not in ("a", "b"):
        raise invalid_request(
            f"Model '{model_id}' (kokoro) times words in English only (its G2P splits other languages "
            "into phonemes without words)",
            "return_timestamps",
        )


def kokoro_spoken_words(model: Any, text: str, kwargs: dict[str, Any]) -> Iterator[tuple[Any, list[tuple]]]:
    """Kokoro's `generate`, with each chunk's words: (audio, [(word, start s, end s)]), the
    times from the chunk's start. mlx-audio's `generate` drops the tokens that its pipeline
    timed (`KokoroPipeline.join_timestamps`, from the predicted durations), so this runs the
    same pipeline with the same options. Punctuation is not a word."""
    pipeline = model._get_pipeline(kwargs.get("lang_code", "a"))
    pipeline.voices = {}  # as `generate` does: a voice given by path is read anew
    voice = kwargs.get("voice") or KOKORO_DEFAULT_VOICE
    for result in pipeline(text, voice=voice, speed=kwargs.get("speed", 1.0), split_pattern=r"\n+"):
        if result.audio is None:
            continue
        words = [
            (token.text, float(token.start_ts), float(token.end_ts))
            for token in result.tokens or ()
            if token.start_ts is not None and token.end_ts is not None and any(c.isalnum() for c in token.text)
        ]
        yield result.audio, words


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


# ---------------------------------------------------------------------- voice training's cache

QWEN3_X_VECTOR = "x_vector"  # the speaker encoder's embedding of the clip, [1, enc_dim]
QWEN3_REF_CODES = "ref_codes"  # the speech tokenizer's codes of the clip, [1, groups, frames]


def training_unsupported(model: Any, model_type_name: str) -> Optional[str]:
    """Why voice training's conditioning cannot be computed on this model (None: it can, or the
    model type decides elsewhere: Kokoro's style fitting, pocket_tts's reference encoder)."""
    if model_type_name == "qwen3_tts" and getattr(model, "speaker_encoder", None) is None:
        kind = getattr(getattr(model, "config", None), "tts_model_type", "") or "non-Base"
        return (
            f"a Qwen3-TTS {kind} model has no speaker encoder to compute a voice's x-vector with (a "
            "CustomVoice model speaks its own speakers, a VoiceDesign model a described voice); voice "
            "training runs on a Qwen3-TTS Base model"
        )
    return None


def qwen3_tts_conditioning(model: Any, audio: np.ndarray) -> dict[str, np.ndarray]:
    """What Qwen3-TTS Base computes from a reference clip before every cloned synthesis, computed
    once: the x-vector (mlx-audio's `extract_speaker_embedding`, both cloning modes use it) and,
    where the speech tokenizer has its encoder, the clip's codes (the in-context mode's prompt,
    used when the voice has a transcript). The same calls on the same array as `generate` makes."""
    import mlx.core as mx

    ref = mx.array(np.asarray(audio, dtype=np.float32))
    out = {QWEN3_X_VECTOR: np.array(model.extract_speaker_embedding(ref), dtype=np.float32)}
    tokenizer = model.speech_tokenizer
    if tokenizer is not None and tokenizer.has_encoder:
        codes = tokenizer.encode(ref[None, None, :])
        mx.eval(codes)
        out[QWEN3_REF_CODES] = np.array(codes)
    return out


@contextlib.contextmanager
def qwen3_tts_cached_voice(model: Any, tensors: dict[str, Any], ref_text: Optional[str]) -> Iterator[dict[str, Any]]:
    """Qwen3-TTS Base speaking a cached conditioning: yields the `generate` options to pass.

    mlx-audio's `generate` takes a clip (`ref_audio`, and `ref_text` for the in-context mode) and
    encodes it on every call; it has no argument for a precomputed x-vector or codes. So, for the
    one synthesis inside this block (the engine thread runs one at a time), the model's
    `extract_speaker_embedding` and its speech tokenizer's `encode` answer from the cache, and a
    one-sample placeholder stands in for the clip. mlx-audio's own per-clip code cache
    (`_icl_cache`, keyed by the clip's size and sum) is swapped for an empty one meanwhile, so the
    placeholder's entry never outlives the block to answer for another voice.
    """
    import mlx.core as mx

    x_vector = mx.array(tensors[QWEN3_X_VECTOR])
    codes = tensors.get(QWEN3_REF_CODES)
    tokenizer = model.speech_tokenizer
    options: dict[str, Any] = {"ref_audio": mx.zeros((1,), dtype=mx.float32)}
    if codes is not None and ref_text and tokenizer is not None and tokenizer.has_encoder:
        codes = mx.array(codes)
        options["ref_text"] = ref_text  # the in-context mode, as cloning from the clip with its transcript
    saved_cache = model._icl_cache
    # Instance attributes shadow the methods (a function is no parameter: nn.Module keeps it
    # as a plain attribute); deleting them afterwards restores the class's own.
    model.extract_speaker_embedding = lambda audio, sr=24000: x_vector
    model._icl_cache = {}
    if "ref_text" in options:
        tokenizer.encode = lambda audio: codes
    try:
        yield options
    finally:
        del model.extract_speaker_embedding
        if "ref_text" in options:
            del tokenizer.encode
        model._icl_cache = saved_cache


def cached_voice(model: Any, model_type_name: str, path: Path, ref_text: Optional[str]):
    """A context manager yielding the `generate` options that speak voice training's cached
    conditioning at `path` (a .safetensors file): pocket_tts (its audio prompt) and Kokoro (its
    fitted voice pack) load it by path themselves; Qwen3-TTS Base through the wrapper above."""
    if model_type_name != "qwen3_tts":
        return contextlib.nullcontext({"voice": str(path)})
    import mlx.core as mx

    return qwen3_tts_cached_voice(model, mx.load(str(path)), ref_text)
