"""A tiny Qwen3-TTS **Base** model with random weights, for tests of its voice cloning and of
voice training's x-vector path (no real Qwen3-TTS weights can be downloaded here).

The layout is a real mlx-community Qwen3-TTS Base checkpoint's, read by mlx-audio's own
`load_model`: config.json (tts_model_type "base": an ECAPA speaker encoder), model.safetensors
(talker + speaker encoder, strict loading), a text tokenizer (tokenizer.json, read with
transformers' AutoTokenizer), generation_config.json, and speech_tokenizer/ (its config and
weights: the decoder that makes audio and the encoder that turns a reference clip into codes for
in-context cloning). Its audio is noise-like and says nothing.

Sizes: mlx-audio's weight sanitizers guess each convolution's layout from its shape, and a
kernel-1 convolution with at most 64 input channels is taken for PyTorch's and transposed; so
every such convolution here has more than 64 channels (72), and the rest is as small as the
model allows; the decoder makes 240 samples a frame rather than 1920 (speech_tokenizer_config).
Generation is greedy and capped at a few codec frames per segment (generation_config.json): the
same input gives the same audio, about half a second a sentence on the shared 2-core box (the
speech tokenizer's encoder, run on a clip for in-context cloning or training, ~1 s a second of
clip). The files take 46 MB, mostly the codebooks (16 groups of 2048 codes, as the real model).

Deterministic (fixed seeds) and atomic (built beside the target, then renamed), as
deployments/tts/tiny_model.py's pocket_tts.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from deployments.hub import build_model_dir

TINY_QWEN3_TTS_ID = "ominix-tiny-qwen3-tts-base"
_FORMAT_VERSION = 1  # bump when the generated files change
MAX_FRAMES = 8  # codec frames per segment (12.5 Hz): a random model rarely says EOS

_SPECIALS = ["[UNK]", "<|im_start|>", "<|im_end|>", "<|tts_pad|>", "<|tts_bos|>", "<|tts_eos|>"]
_WORDS = (
    "assistant user the a of to in is and it this that hello world speech voice trained test "
    "quick brown fox jumps over lazy dog one two three good morning"
).split()
_PUNCTUATION = list(".,!?;:'\"-") + ["\n"]

_CONV_WIDTH = 72  # > 64: see the module's docstring
# The talker's and the code predictor's transformer: one layer at the smallest widths.
_TINY_LAYERS = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 8,
}


def tiny_qwen3_tts_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_QWEN3_TTS_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_qwen3_tts(cache_dir: str | os.PathLike) -> Path:
    """Return the tiny Qwen3-TTS Base model's directory, generating it first if need be."""

    def write(work: Path) -> None:
        vocab = _write_tokenizer(work)
        config = model_config(vocab)
        _write_weights(work, config)
        (work / "config.json").write_text(json.dumps(config, indent=2))
        (work / "generation_config.json").write_text(
            json.dumps({"temperature": 0.0, "max_new_tokens": MAX_FRAMES, "top_k": 1, "repetition_penalty": 1.0})
        )
        (work / "README.md").write_text(
            "Built-in tiny Qwen3-TTS Base model of ominix-serve: random weights, the audio says nothing.\n"
        )

    return build_model_dir(tiny_qwen3_tts_dir(cache_dir), write, f"the tiny TTS model {TINY_QWEN3_TTS_ID}")


def model_config(vocab: dict[str, int]) -> dict:
    """config.json: Qwen3-TTS's real codec layout (16 code groups, 2048 codes, the codec's
    special ids) with the smallest widths; the text side uses this tokenizer's ids."""
    return {
        "model_type": "qwen3_tts",
        "tts_model_type": "base",
        "im_start_token_id": vocab["<|im_start|>"],
        "im_end_token_id": vocab["<|im_end|>"],
        "tts_pad_token_id": vocab["<|tts_pad|>"],
        "tts_bos_token_id": vocab["<|tts_bos|>"],
        "tts_eos_token_id": vocab["<|tts_eos|>"],
        "talker_config": {
            **_TINY_LAYERS,
            "rope_scaling": {"interleaved": True, "mrope_section": [2, 1, 1], "rope_type": "default"},
            "text_hidden_size": 16,
            "text_vocab_size": len(vocab),
            "codec_language_id": {"english": 2050, "chinese": 2055},
            "code_predictor_config": dict(_TINY_LAYERS),
        },
        "speaker_encoder_config": {
            "enc_dim": 16,
            "enc_channels": [_CONV_WIDTH] * 4 + [3 * _CONV_WIDTH],
            "enc_attention_channels": _CONV_WIDTH,
            "enc_se_channels": _CONV_WIDTH,
            "enc_res2net_scale": 8,
        },
    }


def speech_tokenizer_config() -> dict:
    """speech_tokenizer/config.json: the real codes (16 groups of 2048 at 12.5 Hz, the encoder's
    real downsampling), narrow layers, and a decoder that makes 240 samples a frame rather than
    1920: its output-rate convolutions, 72 channels wide, are most of a synthesis's time on a CPU,
    and a random model's audio need not last as long as real speech would."""
    return {
        "encoder_valid_num_quantizers": 16,
        "decode_upsample_rate": 2 * 2 * 10 * 6,
        "decoder_config": {
            "latent_dim": 16,
            "codebook_dim": 2 * _CONV_WIDTH,
            # Two upsampling blocks, halving the width: 72 channels at the output's rate.
            "decoder_dim": 4 * _CONV_WIDTH,
            "upsample_rates": [10, 6],
            "upsampling_ratios": [2, 2],
            "hidden_size": 16,
            "intermediate_size": 32,
            "head_dim": 8,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "vector_quantization_hidden_dimension": 16,
        },
        "encoder_config": {
            "num_filters": _CONV_WIDTH,
            "compress": 1,
            "upsampling_ratios": [40, 24],  # two layers (real: four), 960x as the real one
            "hidden_size": _CONV_WIDTH,
            "codebook_dim": _CONV_WIDTH,
            "intermediate_size": 32,
            "head_dim": 8,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "num_hidden_layers": 1,
            "num_quantizers": 16,
            "vector_quantization_hidden_dimension": 16,
        },
    }


def _write_tokenizer(out: Path) -> dict[str, int]:
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers

    vocab = {token: i for i, token in enumerate(_SPECIALS + _PUNCTUATION + _WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    # Words, punctuation and newlines (Qwen's chat template counts on "\n" being a token).
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(" ", behavior="removed"), pre_tokenizers.Split(Regex(r"\n|\w+|[^\w\s]"), "isolated")]
    )
    tokenizer.add_special_tokens(_SPECIALS[1:])
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 4096})
    )
    return vocab


def _write_weights(out: Path, config: dict) -> None:
    import mlx.core as mx
    from mlx_audio.tts.models.qwen3_tts.config import ModelConfig, Qwen3TTSTokenizerConfig
    from mlx_audio.tts.models.qwen3_tts.qwen3_tts import Model
    from mlx_audio.tts.models.qwen3_tts.speech_tokenizer import Qwen3TTSSpeechTokenizer

    mx.random.seed(0)  # the modules' own initialisation draws from the global generator
    model = Model(ModelConfig.from_dict(config))
    mx.save_safetensors(str(out / "model.safetensors"), _random(model, Model.sanitize, 0), metadata={"format": "mlx"})
    (out / "speech_tokenizer").mkdir()
    st_config = speech_tokenizer_config()
    (out / "speech_tokenizer" / "config.json").write_text(json.dumps(st_config, indent=2))
    mx.random.seed(1)
    tokenizer = Qwen3TTSSpeechTokenizer(
        Qwen3TTSTokenizerConfig(encoder_config=st_config["encoder_config"], decoder_config=st_config["decoder_config"])
    )
    weights = _random(tokenizer, Qwen3TTSSpeechTokenizer.sanitize, 100_000, ("encoder_model.",))
    mx.save_safetensors(str(out / "speech_tokenizer" / "model.safetensors"), weights, metadata={"format": "mlx"})


def _random(module, sanitize, seed: int, redraw: tuple[str, ...] = ()) -> dict:
    """Random parameters for `module` (its own initialisation; what is zero there, and what
    starts with a `redraw` prefix, drawn from N(0, 0.3²)), each saved in the layout mlx-audio's `sanitize` turns
    back into the module's own (it transposes convolutions it takes for PyTorch's)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    params = {}
    for i, (name, value) in enumerate(tree_flatten(module.parameters())):
        weight = value  # MLX's own initialisation keeps activations in range through the layers
        if name.endswith("cluster_usage"):  # codebook usage counts: codes = embedding_sum / usage
            weight = mx.ones(value.shape)
        elif name.startswith(redraw) or not mx.any(value).item():
            # Zero at init (codebooks, some biases) passes no signal; and the speech tokenizer's
            # encoder, as initialised, gives one code for every frame of every clip.
            weight = mx.random.normal(value.shape, key=mx.random.key(seed + i)) * 0.3
        if weight.ndim == 3:
            weight = next(
                weight.transpose(perm)
                for perm in itertools.permutations(range(3))
                if sanitize({name: weight.transpose(perm)})[name].shape == value.shape
            )
        params[name] = weight
    return params
