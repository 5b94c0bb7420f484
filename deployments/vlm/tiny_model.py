"""The built-in tiny VLM: a real Qwen2-VL checkpoint with random weights, made on first use.

It lets the default graph serve image chat and /v1/vlm/completions on a machine with no
network: the files are what mlx-vlm expects of a Hugging Face Qwen2-VL repo (config.json with
its vision_config, model.safetensors, tokenizer.json with Qwen2-VL's vision tokens, a chat
template, preprocessor_config.json for its image processor), so it loads through
`mlx_vlm.load` and runs the vision tower, the merger and M-RoPE like a real model. Images are
resized to at most 112x112 pixels (16 image tokens) to keep it fast. Its output is meaningless.

Deterministic (fixed seeds, the tiny models' tokenizer corpus in deployments/tiny_models) and
atomic like the other built-ins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from deployments.hub import build_model_dir
from deployments.tiny_models import train_bpe_tokenizer

TINY_VLM_ID = "ominix-tiny-qwen2-vl"
# Bump when the generated files change, so old caches are not reused.
_FORMAT_VERSION = 1

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VOCAB_SIZE = 1024
IMAGE_PIXELS = (56 * 56, 112 * 112)  # min, max: a 112x112 image is 4x4 merged patches, 16 tokens

# Qwen2-VL's template, without the system default: image parts become the vision tokens.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}"
    "{% if part['type'] in ('image', 'image_url') %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TEXT_CONFIG = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},  # sums to head_dim / 2
    "tie_word_embeddings": True,
}
VISION_CONFIG = {
    "depth": 2,
    "embed_dim": 32,
    "hidden_size": 64,  # the merger's output: the text model's width
    "num_heads": 4,
    "mlp_ratio": 2,
    "patch_size": 14,
    "spatial_patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "in_channels": 3,
}


def tiny_vlm_dir(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir).expanduser() / f"{TINY_VLM_ID}-v{_FORMAT_VERSION}"


def ensure_tiny_vlm(cache_dir: str | os.PathLike) -> Path:
    """Return the tiny VLM's directory, generating it first if it is not there yet."""

    def write(work: Path) -> None:
        config = _write_tokenizer(work)
        _write_processor(work)
        _write_weights(work, config)
        (work / "config.json").write_text(json.dumps(config, indent=2))
        (work / "README.md").write_text("Built-in tiny Qwen2-VL of ominix-serve: random weights, meaningless output.\n")

    return build_model_dir(tiny_vlm_dir(cache_dir), write, f"the built-in tiny VLM {TINY_VLM_ID}")


def model_config(token_ids: dict[str, int], vocab_size: int) -> dict:
    return {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "model_type": "qwen2_vl",
        **TEXT_CONFIG,
        "vocab_size": vocab_size,
        "vision_config": VISION_CONFIG,
        "image_token_id": token_ids["<|image_pad|>"],
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
        "eos_token_id": [token_ids["<|im_end|>"]],
        "torch_dtype": "float32",
    }


def _write_tokenizer(out: Path) -> dict:
    """tokenizer.json and its config; returns the model config that matches its ids."""
    tokenizer = train_bpe_tokenizer(SPECIAL_TOKENS, VOCAB_SIZE)
    tokenizer.save(str(out / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": TEXT_CONFIG["max_position_embeddings"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (out / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}))
    # Every id the model may emit must decode: the vocabulary is what BPE training reached.
    return model_config({t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS}, tokenizer.get_vocab_size())


def _write_processor(out: Path) -> None:
    """Qwen2-VL's image processor settings (CLIP's normalisation), capped to tiny images."""
    low, high = IMAGE_PIXELS
    settings = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "patch_size": VISION_CONFIG["patch_size"],
        "temporal_patch_size": VISION_CONFIG["temporal_patch_size"],
        "merge_size": VISION_CONFIG["spatial_merge_size"],
        "min_pixels": low,
        "max_pixels": high,
        "size": {"shortest_edge": low, "longest_edge": high},
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
    }
    # All three files: mlx-vlm asks the hub for any that is missing, which offline means a wait.
    for name in ("preprocessor_config.json", "video_preprocessor_config.json"):
        (out / name).write_text(json.dumps(settings, indent=2))
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}))


def _write_weights(out: Path, config: dict) -> None:
    """Random weights in mlx-vlm's own parameter names (its sanitize() leaves them as they are)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.models import qwen2_vl

    args = qwen2_vl.ModelConfig.from_dict(json.loads(json.dumps(config)))
    args.text_config = qwen2_vl.TextConfig.from_dict(args.text_config)
    args.vision_config = qwen2_vl.VisionConfig.from_dict(args.vision_config)
    mx.random.seed(0)
    model = qwen2_vl.Model(args)
    params = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), params, metadata={"format": "mlx"})
