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
a prompt's chunks, whose lengths vary. A one-token RoPE (`DecodeRope`) also makes its
frequencies once and, within one forward pass (`one_forward`, which the decode step opens), its
angles once for a layer's queries and keys: the same arithmetic in the same order, 13 primitives
a layer instead of 24 (a 2-4 % shorter step at 1 and 16 streams, paired runs in
docs/performance.md section 14). Per model, not process-wide: a model the engine did not
load (a test's reference, a peer in the same benchmark) runs as mlx-lm runs it. CPU backend
only; on a GPU the op is already one kernel. No Ray here.
"""

from __future__ import annotations

import contextlib
import logging
import threading
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
    """An `nn.RoPE` whose one-token calls are compiled functions on the CPU backend (a prompt's
    chunks run the op as it is): a non-traditional rotation as `DecodeRope` computes it, an
    interleaved one as the op itself, compiled."""

    _compiled: Any = None
    _decode: Any = None  # DecodeRope, or None: a traditional (interleaved) rotation

    def __call__(self, x, offset=0):
        if x.shape[-2] != 1 or not _on_cpu(None):
            return super().__call__(x, offset)
        if not isinstance(offset, mx.array):
            offset = mx.array(offset, dtype=mx.int32)
        if self._decode is None:
            return self._compiled(x, offset)
        return self._decode(x, offset)


class DecodeRope:
    """One token's rotation as MLX's `mx.fast.rope` fallback computes it (non-traditional):
    positions (offset x scale) times the inverse frequencies exp(-i log(base) / (dims/2)), their
    cos and sin, then each half of the rotated dims; dims past `dims` pass through.

    A decode step rotates a layer's queries and keys by the same positions. The fallback makes
    the angles at every call, from two `arange`s; here the frequencies are made once, and within
    one forward pass (`one_forward`) the angles once for both calls: 13 primitives a layer
    instead of 24. The arithmetic is the fallback's, in its order: the result is the op's bit for
    bit (tests/unit/kernels/test_llm_norms.py)."""

    def __init__(self, dims: int, base: float, scale: float):
        self.dims, self.half, self.scale = dims, dims // 2, scale
        log_step = mx.log(mx.array(base, mx.float32)) / self.half
        self.inv_freqs = mx.exp(mx.arange(0.0, -self.half, -1.0, dtype=mx.float32) * log_step)
        mx.eval(self.inv_freqs)
        self._angles: dict[tuple, Any] = {}  # (dtype, x's ndim) -> compiled: offset -> (cos, sin)
        self._rotate = mx.compile(self._rotation)
        self._last: tuple = ()  # (forward pass, offset, key, (cos, sin)): the queries' call's angles

    def __call__(self, x, offset):
        return self._rotate(x, *self._angles_at(offset, (x.dtype, x.ndim)))

    def _angles_at(self, offset, key: tuple):
        current = getattr(_forward, "pass_", None)
        last = self._last
        if current is not None and last and last[0] is current and last[1] is offset and last[2] == key:
            return last[3]
        if key not in self._angles:
            self._angles[key] = mx.compile(self._angles_function(*key))
        angles = self._angles[key](offset)
        # The offset is held with them: an in-place update of an array keeps its id, so the id
        # alone could match stale angles; within one pass a layer's offset is not updated
        # between its queries' call and its keys'.
        self._last = (current, offset, key, angles) if current is not None else ()
        return angles

    def _angles_function(self, dtype, ndim: int):
        def angles(offset):  # a scalar, or one per row of x: [B] -> [B, 1, ..., 1]
            positions = offset.astype(mx.float32) * self.scale
            if offset.ndim:
                positions = positions.reshape((-1,) + (1,) * (ndim - 1))
            theta = positions * self.inv_freqs
            return mx.cos(theta).astype(dtype), mx.sin(theta).astype(dtype)

        return angles

    def _rotation(self, x, cos, sin):
        x1, x2, *rest = mx.split(x, [self.half, self.dims] if self.dims < x.shape[-1] else [self.half], axis=-1)
        return mx.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos, *rest], axis=-1)


_forward = threading.local()


@contextlib.contextmanager
def one_forward():
    """One forward pass of a model: in it, a layer's one-token RoPE calls with the same offset
    array share their angles (deployments/llm/decode.py wraps each decode forward in it)."""
    outer = getattr(_forward, "pass_", None)
    _forward.pass_ = object()
    try:
        yield
    finally:
        _forward.pass_ = outer


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
            if not module.traditional:
                module._decode = DecodeRope(module.dims, module.base, module.scale)
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
