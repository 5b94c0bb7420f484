"""The built-in tiny TTS model: a real pocket_tts checkpoint with random weights, made on first use.

It lets the default graph serve every speech route offline: config.json, model.safetensors,
a WordLevel tokenizer.json and two preset voices in `voices/<name>.safetensors`, exactly the
layout `mlx_audio.tts.utils.load_model` reads for pocket_tts (strict loading: the saved keys
are the model's own parameters). It streams, clones from reference audio and switches presets
like the real model; its audio is noise-like and says nothing.

Generation is deterministic (fixed seeds, fixed vocabulary) and atomic (built in a temporary
directory, then renamed), so concurrent replicas can race safely.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from deployments.hub import build_model_dir

logger = logging.getLogger(__name__)

TINY_TTS_ID = "ominix-tiny-pocket-tts"
# Bump when the generated files change, so old caches are not reused.
_FORMAT_VERSION = 1
TINY_TTS_VOICES = ("alba", "marius")
SAMPLE_RATE = 24000

_WORDS = (
    "the a an of to in on for with from by is are was be have it this that and or not "
    "hello world speech voice audio model server stream sentence test quick brown fox jumps "
    "over lazy dog one two three four five good morning today please thank you"
).split()
_PUNCTUATION = list(".,!?;:'\"-")
_SPECIALS = ["[UNK]"]


def _vocabulary() -> list[str]:
    return _SPECIALS + _PUNCTUATION + _WORDS


def model_config(n_bins: int) -> dict:
    """The tiny config measured to run (see shared reference offline-models.md)."""
    return {
        "model_type": "pocket_tts",
        # Random logits rarely cross the default EOS threshold: a lower one ends
        # sentences after a few frames, as a real model does at the end of the text.
        "eos_threshold": -8.0,
        "temp": 0.0,  # greedy: the same text and voice give the same audio (testable)
        "flow_lm": {
            "d_model": 8,
            "num_heads": 2,
            "num_layers": 1,
            "dim_feedforward": 24,
            "max_period": 10000,
            "n_bins": n_bins,
            "lut_dim": 8,
            "flow_dim": 8,
            "flow_depth": 1,
            "ldim": 4,
            "dtype": "float32",
        },
        "mimi": {
            "channels": 1,
            "sample_rate": SAMPLE_RATE,
            "frame_rate": 12.5,
            "dimension": 8,
            "quantizer_dimension": 4,
            "quantizer_output_dimension": 8,
            "n_filters": 2,
            "n_residual_layers": 1,
            "ratios": [8, 6, 4, 5],
            "kernel_size": 3,
            "last_kernel_size": 3,
            "residual_kernel_size": 3,
            "dilation_base": 2,
            "compress": 2,
            "transformer_d_model": 8,
            "transformer_num_heads": 2,
            "transformer_num_layers": 1,
            "transformer_layer_scale": 0.01,
            "transformer_context": 16,
            "transformer_max_period": 10000,
            "transformer_dim_feedforward": 16,
            "dtype": "float32",
        },
    }


def tiny_tts_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_TTS_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_tts(cache_dir: str | os.PathLike) -> Path:
    """Return the tiny model's directory, generating it first if it is not there yet."""

    def write(work: Path) -> None:
        n_bins = _write_tokenizer(work)
        config = model_config(n_bins)
        _write_weights(work, config)
        (work / "config.json").write_text(json.dumps(config, indent=2))
        (work / "README.md").write_text(
            "Built-in tiny pocket_tts model of ominix-serve: random weights, the audio says nothing.\n"
        )

    return build_model_dir(tiny_tts_dir(cache_dir), write, f"the built-in tiny TTS model {TINY_TTS_ID}")


def _write_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {token: i for i, token in enumerate(_vocabulary())}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(out / "tokenizer.json"))
    return len(vocab)


def _write_weights(out: Path, config: dict) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.tts.models.pocket_tts.pocket_tts import Model

    # The model reads its tokenizer while it is built.
    config = {**config, "model_path": str(out)}
    mx.random.seed(0)
    model = Model(config)
    params = {}
    for i, (name, value) in enumerate(tree_flatten(model.parameters())):
        params[name] = mx.random.normal(value.shape, key=mx.random.key(i)) * 0.3
    # The speaker projection is a zero buffer at init: give cloning a real (random) map.
    mx.save_safetensors(str(out / "model.safetensors"), params, metadata={"format": "mlx"})
    voices = out / "voices"
    voices.mkdir()
    dim = model.flow_lm.dim
    for i, name in enumerate(TINY_TTS_VOICES):
        prompt = mx.random.normal((1, 4, dim), key=mx.random.key(1000 + i))
        mx.save_safetensors(str(voices / f"{name}.safetensors"), {"audio_prompt": prompt})
