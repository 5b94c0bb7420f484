"""mlx-lm's RMSNorm and RoPE on MLX's CPU backend, each run as one compiled function.

On Metal and CUDA `mx.fast.rms_norm` and `mx.fast.rope` are one kernel each. On the CPU backend
they are their fallback graphs, built op by op at every call: an RMSNorm is ~8 primitives, a
RoPE ~15, and a 2-layer Qwen3's decode step was 331 primitives, most of them these. Each
primitive costs the host its dispatch (~1.5 us here) whatever its size, so on a model whose step
is short the host's time per step is mostly that: mlx-lm's `BatchGenerator` on the bench's
2-layer model spent 0.77 ms of its thread's CPU per step, 0.56 ms with both compiled (1203 ->
1664 tok/s at one stream, docs/performance.md section 14). On SmolLM2-135M, whose step is
memory-bound, the decode thread's CPU per step went from 29 to 23 ms and the step from 76 to
72 ms: time a 2-core machine gives back to the other replicas.

`apply(model)` swaps the class of each `nn.RMSNorm` and `nn.RoPE` of one model for a subclass
that calls the same `mx.fast` op inside `mx.compile`: the same primitives, traced once and fused,
so the results are the op's own (tests/unit/kernels/test_llm_norms.py checks them bit for bit).
The norm is compiled shapeless; RoPE is compiled for one-token steps only (one trace per batch
size, the position an array input, so a new position needs no new trace) and runs as before on
a prompt's chunks, whose lengths vary. Per model, not process-wide: a model the engine did not
load (a test's reference, a peer in the same benchmark) runs as mlx-lm runs it. CPU backend
only; on a GPU the op is already one kernel. No Ray here.
"""

from __future__ import annotations

import logging
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from deployments.kernels.conv import _on_cpu

logger = logging.getLogger(__name__)


class CompiledRMSNorm(nn.RMSNorm):
    """An `nn.RMSNorm` whose call is one compiled function on the CPU backend."""

    _compiled: Any = None

    def __call__(self, x):
        if not _on_cpu(None):
            return super().__call__(x)
        return self._compiled(x, self["weight"])


class CompiledRoPE(nn.RoPE):
    """An `nn.RoPE` whose one-token calls are one compiled function on the CPU backend."""

    _compiled: Any = None

    def __call__(self, x, offset=0):
        if x.shape[-2] != 1 or not _on_cpu(None):
            return super().__call__(x, offset)
        if not isinstance(offset, mx.array):
            offset = mx.array(offset, dtype=mx.int32)
        return self._compiled(x, offset)


def apply(model: Any) -> int:
    """Compile the RMSNorms and RoPEs of `model` (CPU backend only); returns how many."""
    if not _on_cpu(None):
        return 0
    swapped = 0
    for _, module in model.named_modules():
        if type(module) is nn.RMSNorm:
            module.__class__ = CompiledRMSNorm
            eps = module.eps
            module._compiled = mx.compile(lambda x, w, eps=eps: mx.fast.rms_norm(x, w, eps), shapeless=True)
            swapped += 1
        elif type(module) is nn.RoPE:
            module.__class__ = CompiledRoPE
            module._compiled = mx.compile(_rope(module.dims, module.traditional, module.base, module.scale))
            swapped += 1
    if swapped:
        logger.info("MLX CPU backend: %d RMSNorm and RoPE layers run compiled (deployments.kernels.llm_norms)", swapped)
    return swapped


def _rope(dims: int, traditional: bool, base: float, scale: float):
    def rope(x, offset):
        return mx.fast.rope(x, dims, traditional=traditional, base=base, scale=scale, offset=offset)

    return rope


def compile_served(model: Any, warm: bool = True) -> int:
    """As the LLM engine loads a model: `apply` unless `OMINIX_CPU_KERNELS` leaves `llm_norms`
    out, then (`warm`) one token through the model on a fresh cache, so that MLX builds the
    compiled kernels at load rather than at the first request (~2.6 s of a C++ compiler's time
    for SmolLM2 on a machine that has not built them yet; MLX keeps them in its temp directory
    after). A sharded model's rank cannot run a step on its own: no `warm` there."""
    from mlx_lm.models.cache import make_prompt_cache

    from deployments.kernels.conv import enabled_kernels

    swapped = apply(model) if "llm_norms" in enabled_kernels() else 0
    if swapped and warm:
        mx.eval(model(mx.array([[0]], dtype=mx.uint32), cache=make_prompt_cache(model)))
    return swapped
