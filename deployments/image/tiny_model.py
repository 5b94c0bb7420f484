"""The built-in tiny image model: FLUX.2-klein's architecture with random weights, made on first use.

It lets the default graph serve /v1/images/generations offline. mflux's own classes build it
(`Flux2Klein`'s VAE, transformer and Qwen3 text encoder, shrunk through the same ModelConfig
overrides mflux uses for its klein-4B/9B variants) and mflux's `save_model` writes it, so the
slot loads it exactly as it loads a saved real model. What cannot shrink:
- the text encoder keeps 28 layers: FLUX.2's prompt encoder reads hidden states 9, 18 and 27;
- the VAE has no size settings: it stays ~84M parameters (~340 MB on disk, ~2 s to build).
Widths are multiples of 64 so that mflux's 8-bit quantization (group size 64) works on it too.
The tokenizer is the byte-level BPE with Qwen3's chat template that the tiny LLM has too
(deployments/tiny_models; FLUX.2 formats prompts through the chat template). Its images are
coloured noise.

Generation is deterministic (fixed seed) and atomic (deployments.hub.build_model_dir).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from deployments.hub import build_model_dir
from deployments.tiny_models import write_qwen3_tokenizer

logger = logging.getLogger(__name__)

TINY_IMAGE_ID = "ominix-tiny-flux2-klein"
# Bump when the generated files change, so old caches are not reused.
_FORMAT_VERSION = 1

_TEXT_HIDDEN = 64
_TOKENIZER_MAX_LENGTH = 4096  # as the tiny LLM's: the same tokenizer files
TRANSFORMER_OVERRIDES = {
    "num_layers": 1,
    "num_single_layers": 1,
    "num_attention_heads": 2,
    "attention_head_dim": 32,
    "axes_dims_rope": [8, 8, 8, 8],  # sums to attention_head_dim
    "joint_attention_dim": 3 * _TEXT_HIDDEN,  # three text-encoder layers, concatenated
    "mlp_ratio": 2.0,
}
TEXT_ENCODER_OVERRIDES = {
    "vocab_size": 1024,  # the tokenizer's vocabulary
    "hidden_size": _TEXT_HIDDEN,
    "num_hidden_layers": 28,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "intermediate_size": 128,
}


def tiny_image_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_IMAGE_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_image(cache_dir: str | os.PathLike) -> Path:
    """Return the tiny model's directory, generating it first if it is not there yet."""

    def write(work: Path) -> None:
        tokenizer = work / "tokenizer"
        tokenizer.mkdir()
        write_qwen3_tokenizer(tokenizer, TEXT_ENCODER_OVERRIDES["vocab_size"], _TOKENIZER_MAX_LENGTH)
        _write_weights(work)
        # config.json marks the directory finished (build_model_dir) and tells the engine
        # which pipeline and sizes to build; real models are recognised by name instead.
        config = {
            "family": "flux2-klein",
            "transformer_overrides": TRANSFORMER_OVERRIDES,
            "text_encoder_overrides": TEXT_ENCODER_OVERRIDES,
        }
        (work / "config.json").write_text(json.dumps(config, indent=2))
        (work / "README.md").write_text(
            "Built-in tiny FLUX.2-klein model of ominix-serve: random weights, the images are noise.\n"
        )

    return build_model_dir(tiny_image_dir(cache_dir), write, f"the built-in tiny image model {TINY_IMAGE_ID}")


def _write_weights(out: Path) -> None:
    import mlx.core as mx
    from mflux.models.flux2.flux2_initializer import Flux2Initializer
    from mflux.models.flux2.variants.txt2img.flux2_klein import Flux2Klein
    from mlx import nn

    from deployments.image.pipelines import tiny_model_config

    mx.random.seed(0)
    # Flux2Klein's constructor loads weights; build the same modules without any to load.
    model = Flux2Klein.__new__(Flux2Klein)
    nn.Module.__init__(model)
    Flux2Initializer._init_config(model, tiny_model_config(TRANSFORMER_OVERRIDES, TEXT_ENCODER_OVERRIDES))
    model.small_text_encoder = model.small_decoder = False
    Flux2Initializer._init_models(model)
    model.bits = None
    model.save_model(str(out))
