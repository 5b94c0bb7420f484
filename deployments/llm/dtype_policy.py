"""How the LLM slot holds a model's weights: the dtype policy of MLX's CPU backend.

On the CPU backend only dense float32 matrix products go through BLAS (deployments/blas.py);
bfloat16, float16 and quantized matrix products are MLX's own loops. Measured on the 2-core
box: a ~100M Qwen3 in bfloat16 decodes 35 tok/s at 16 streams, the same weights in float32
~150 tok/s; a 4-bit matmul is ~3.7x slower than dense float32 for generation
(docs/performance.md). What
mlx-community ships is bf16 and 4-bit, tuned for Metal.

`llm.cpu_dtype` decides, per model at load:
- `auto` (default): on the CPU backend, bf16/fp16/quantized weights become dense float32 when
  the float32 copy fits `cpu_upcast_max_bytes`; on a GPU (Metal, or CUDA with MLX's CUDA build)
  they stay as they are (fast there).
- `float32`: dense float32 on the CPU backend whatever the size.
- `keep`: the weights as the checkpoint has them.
The upcast is exact and dequantisation is MLX's own `mx.dequantize` (mlx-lm's
`dequantize_model`), so the model computes the same function up to float rounding.

Ray-free; MLX is imported by the functions that need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

CpuDtype = Literal["auto", "float32", "keep"]


@dataclass(frozen=True)
class Weights:
    """What a loaded model's parameters are: their dtypes, whether any layer is quantized,
    and the bytes they take now and would take as dense float32."""

    dtypes: frozenset[str]
    quantized: bool
    bytes: int
    float32_bytes: int

    @property
    def dense_float32(self) -> bool:
        return not self.quantized and self.dtypes <= {"float32"}

    @property
    def form(self) -> str:
        """e.g. "float32", "bfloat16", "4-bit quantized + bfloat16"."""
        floats = "+".join(sorted(self.dtypes - {"uint32"})) or "none"
        return f"quantized + {floats}" if self.quantized else floats


@dataclass(frozen=True)
class Decision:
    upcast: bool
    reason: str


def decide(setting: CpuDtype, on_cpu: bool, weights: Weights, max_bytes: int) -> Decision:
    """Whether to make `weights` dense float32, and why (for the log and the status)."""
    if weights.dense_float32:
        return Decision(False, "already dense float32")
    if setting == "keep":
        return Decision(False, "llm.cpu_dtype is keep")
    if not on_cpu:
        return Decision(False, "not the CPU backend (a GPU: Metal or CUDA): its bf16/fp16/quantized kernels are fast")
    if setting == "auto" and weights.float32_bytes > max_bytes:
        return Decision(
            False,
            f"the float32 copy ({weights.float32_bytes >> 20} MiB) exceeds llm.cpu_upcast_max_bytes "
            f"({max_bytes >> 20} MiB)",
        )
    return Decision(True, f"CPU backend: {weights.form} is slower than dense float32 there")


def inspect_weights(model: Any) -> Weights:
    """The parameters of an mlx-lm model; a quantized layer counts as its unpacked elements."""
    from mlx.utils import tree_flatten

    groups = {name: module.group_size for name, module in model.named_modules() if _is_quantized(module)}
    params = dict(tree_flatten(model.parameters()))
    dtypes, size, elements = set(), 0, 0
    for name, array in params.items():
        owner, _, leaf = name.rpartition(".")
        size += array.nbytes
        if owner in groups and leaf in ("scales", "biases"):
            continue  # folded into the weight they scale
        if owner in groups and leaf == "weight":
            elements += params[f"{owner}.scales"].size * groups[owner]
        else:
            elements += array.size
            dtypes.add(str(array.dtype).removeprefix("mlx.core."))
    return Weights(frozenset(dtypes), bool(groups), size, elements * 4)


def upcast(model: Any) -> None:
    """Dequantize every quantized layer and cast every floating parameter to float32, in place."""
    import mlx.core as mx
    from mlx_lm.utils import dequantize_model

    dequantize_model(model)
    model.set_dtype(mx.float32)
    mx.eval(model.parameters())


def on_cpu_backend() -> bool:
    """The CPU backend, not "not Metal": MLX's CUDA build computes on a GPU too."""
    from deployments.accelerator import on_cpu_backend

    return on_cpu_backend()


def _is_quantized(module: Any) -> bool:
    return hasattr(module, "group_size") and "scales" in module
