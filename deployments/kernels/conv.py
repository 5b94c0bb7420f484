"""1-D convolutions as matrix products, for MLX's CPU backend.

MLX's CPU `conv1d` with dilation and its `conv_transpose1d` run as naive loops: on Kokoro's
layers they are 74-120x slower than the same arithmetic as BLAS matrix products, which is
what makes Kokoro-82M synthesize at ~15x real time on a CPU (shared/reference/offline-models.md).
Here:

- `conv1d`: one GEMM per kernel tap over a strided, dilated view of the padded input, summed
  (used for dilated or grouped convolutions: undilated ones MLX already runs as a GEMM);
- `conv_transpose1d`: one GEMM for all taps at once (input times every tap's weights), then an
  overlap-add of the tap outputs at their stride/dilation offsets;
- grouped convolutions as a batched GEMM over the groups (depthwise as a broadcast multiply);
- wide stride-1 convolutions (7+ taps) through the FFT (deployments/kernels/fft_conv.py).

`OMINIX_CPU_KERNELS` switches them: unset or `all` (the default), `none`, or a comma list of
`gemm_conv`, `fft_conv` (the FFT path needs `gemm_conv`'s dispatch), `kokoro` (Kokoro's fused
AdaIN + Snake, deployments/kernels/kokoro.py), `llm_attention` (mlx-lm's prefill attention,
deployments/kernels/llm_attention.py, installed by the LLM engine) and `llm_norms` (an LLM's
RMSNorms and RoPEs compiled, deployments/kernels/llm_norms.py, applied by the LLM engine to the
models it loads).

`install_cpu_kernels()` replaces `mx.conv1d` / `mx.conv_transpose1d` in the process with
wrappers that use these on the CPU device and call MLX's own op everywhere else (Metal, an
explicit GPU stream). Models look the op up on `mlx.core` when they run or keep a reference
taken when they are built (Kokoro passes `mx.conv1d` around), so install before building one.
Unit tests compare every path with MLX's own op (tests/unit/kernels/test_conv.py).
"""

from __future__ import annotations

import logging
import os
import threading

import mlx.core as mx

from deployments.kernels import fft_conv

logger = logging.getLogger(__name__)

# The MLX ops replaced by install_cpu_kernels(), by name: the fallback and the reference.
_ORIGINAL: dict = {}
_LOCK = threading.Lock()
KERNELS_ENV = "OMINIX_CPU_KERNELS"
KERNELS = ("gemm_conv", "fft_conv", "kokoro", "llm_attention", "llm_norms")
# What install_cpu_kernels() switched on (read by the ops at call time).
_ENABLED: set = set()


def enabled_kernels(value: str | None = None) -> set:
    """The kernels `OMINIX_CPU_KERNELS` (or `value`) asks for: all of them unless it says."""
    value = (os.environ.get(KERNELS_ENV, "all") if value is None else value).strip().lower()
    if value in ("", "all", "1", "true"):
        return set(KERNELS)
    if value in ("none", "0", "false"):
        return set()
    names = {v.strip() for v in value.split(",") if v.strip()}
    unknown = names - set(KERNELS)
    if unknown:
        raise ValueError(f"{KERNELS_ENV}: unknown kernels {sorted(unknown)} (known: {', '.join(KERNELS)}, all, none)")
    return names


def is_enabled(name: str) -> bool:
    return name in _ENABLED


def _pad_time(x: mx.array, before: int, after: int) -> mx.array:
    if before == 0 and after == 0:
        return x
    return mx.pad(x, [(0, 0), (before, after), (0, 0)])


def _tap_matmul(x: mx.array, w_tap: mx.array, groups: int) -> mx.array:
    """x (N, L, C_in) times one tap's weights w_tap (C_out, C_in/groups) -> (N, L, C_out)."""
    if groups == 1:
        return x @ w_tap.T
    n, length, c_in = x.shape
    c_out, c_group = w_tap.shape
    if c_group == 1 and c_out == groups:  # depthwise: one weight per channel
        return x * w_tap[:, 0]
    xg = x.reshape(n * length, groups, c_group).transpose(1, 0, 2)  # (G, N*L, Cg)
    wg = w_tap.reshape(groups, c_out // groups, c_group).transpose(0, 2, 1)  # (G, Cg, Cout/G)
    return (xg @ wg).transpose(1, 0, 2).reshape(n, length, c_out)


def _conv1d_length(padded: int, kernel: int, stride: int, dilation: int) -> int:
    return (padded - dilation * (kernel - 1) - 1) // stride + 1


def conv1d(
    x: mx.array, weight: mx.array, stride: int = 1, padding: int = 0, dilation: int = 1, groups: int = 1
) -> mx.array:
    """Same result as `mx.conv1d` (input (N, L, C_in), weight (C_out, K, C_in/groups))."""
    kernel = weight.shape[1]
    x = _pad_time(x, padding, padding)
    length_out = _conv1d_length(x.shape[1], kernel, stride, dilation)
    span = stride * (length_out - 1) + 1
    out = None
    for k in range(kernel):
        start = k * dilation
        tap = x[:, start : start + span : stride, :]
        y = _tap_matmul(tap, weight[:, k, :], groups)
        out = y if out is None else out + y
    return out


def _all_taps(x: mx.array, weight: mx.array, groups: int) -> mx.array:
    """Every tap's contribution: x (N, L, C_in) -> (N, L, K, C_out), one GEMM for groups=1."""
    n, length, c_in = x.shape
    c_out, kernel, c_group = weight.shape
    if groups == 1:
        w = weight.transpose(2, 1, 0).reshape(c_in, kernel * c_out)  # (C_in, K*C_out)
        return (x.reshape(n * length, c_in) @ w).reshape(n, length, kernel, c_out)
    taps = [_tap_matmul(x, weight[:, k, :], groups) for k in range(kernel)]
    return mx.stack(taps, axis=2)


def _transpose_length(length, kernel, stride, padding, dilation, output_padding) -> int:
    return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_transpose1d(
    x: mx.array,
    weight: mx.array,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    output_padding: int = 0,
    groups: int = 1,
) -> mx.array:
    """Same result as `mx.conv_transpose1d` (input (N, L, C_in), weight (C_out, K, C_in/groups)).

    Input step t with tap k lands at output position t*stride + k*dilation - padding. Writing a
    tap's offset k*dilation as q*stride + r, its outputs fill column r of a (steps, stride) grid
    shifted down by q rows: each column is a sum of shifted tap outputs (the overlap-add)."""
    n, length, _ = x.shape
    c_out, kernel, _ = weight.shape
    z = _all_taps(x, weight, groups)
    length_out = _transpose_length(length, kernel, stride, padding, dilation, output_padding)
    rows = -(-(length_out + padding) // stride)  # grid rows needed to cover the output
    columns = []
    for r in range(stride):
        column = None
        for k in range(kernel):
            q, rk = divmod(k * dilation, stride)
            if rk != r or q >= rows:  # not this column, or cropped off the output
                continue
            part = z[:, : min(length, rows - q), k, :]
            part = _pad_time(part, q, rows - q - part.shape[1])
            column = part if column is None else column + part
        columns.append(column if column is not None else mx.zeros((n, rows, c_out), dtype=z.dtype))
    grid = mx.stack(columns, axis=2).reshape(n, rows * stride, c_out)
    return grid[:, padding : padding + length_out, :]


def _on_cpu(stream) -> bool:
    device = stream if stream is not None else mx.default_device()
    device = getattr(device, "device", device)  # a Stream carries its device
    return getattr(device, "type", None) == mx.DeviceType.cpu


def _conv1d_op(input, weight, stride=1, padding=0, dilation=1, groups=1, *, stream=None):
    degenerate = input.ndim != 3 or _conv1d_length(input.shape[1] + 2 * padding, weight.shape[1], stride, dilation) <= 0
    # Undilated, ungrouped: MLX's CPU op is already a GEMM (as fast or faster, measured).
    native_fast = dilation == 1 and groups == 1
    if degenerate or not _on_cpu(stream):  # MLX's op: its result or its error
        return original_op("conv1d")(input, weight, stride, padding, dilation, groups, stream=stream)
    length_out = _conv1d_length(input.shape[1] + 2 * padding, weight.shape[1], stride, dilation)
    if "fft_conv" in _ENABLED and fft_conv.use_fft(weight.shape[1], stride, dilation, groups, length_out):
        return fft_conv.fft_conv1d(input, weight, padding, dilation)
    if native_fast:
        return original_op("conv1d")(input, weight, stride, padding, dilation, groups, stream=stream)
    return conv1d(input, weight, stride, padding, dilation, groups)


def _conv_transpose1d_op(input, weight, stride=1, padding=0, dilation=1, output_padding=0, groups=1, *, stream=None):
    # Padding beyond the kernel's span, an empty output: MLX's op has its own answer; keep it.
    unusual = (
        input.ndim != 3
        or padding > dilation * (weight.shape[1] - 1)
        or _transpose_length(input.shape[1], weight.shape[1], stride, padding, dilation, output_padding) <= 0
    )
    if unusual or not _on_cpu(stream):
        return original_op("conv_transpose1d")(
            input, weight, stride, padding, dilation, output_padding, groups, stream=stream
        )
    return conv_transpose1d(input, weight, stride, padding, dilation, output_padding, groups)


_REPLACEMENTS = {"conv1d": _conv1d_op, "conv_transpose1d": _conv_transpose1d_op}


def install_cpu_kernels(kernels: set | None = None) -> bool:
    """Replace MLX's 1-D convolutions with the GEMM / FFT forms when MLX runs on its CPU backend.

    `kernels`: which (default: `OMINIX_CPU_KERNELS`, else all). Idempotent and thread-safe.
    Returns whether the convolution kernels are installed. On Metal nothing changes (MLX's own
    kernels are fast there). Kokoro's kernels are installed by its model hook
    (deployments/kernels/kokoro.py), when `kokoro` is among the enabled ones."""
    with _LOCK:
        if _ORIGINAL:
            return True
        if mx.default_device().type != mx.DeviceType.cpu:
            return False
        chosen = enabled_kernels() if kernels is None else set(kernels)
        _ENABLED.clear()
        _ENABLED.update(chosen)
        if "gemm_conv" not in chosen:
            return False
        for name, replacement in _REPLACEMENTS.items():
            _ORIGINAL[name] = getattr(mx, name)
            setattr(mx, name, replacement)
        logger.info("MLX CPU backend: kernels %s (deployments.kernels)", ", ".join(sorted(chosen)))
        return True


def uninstall_cpu_kernels() -> None:
    """Put MLX's own ops back (benchmarks compare both in one process)."""
    with _LOCK:
        for name, op in _ORIGINAL.items():
            setattr(mx, name, op)
        _ORIGINAL.clear()
        _ENABLED.clear()


def original_op(name: str):
    """MLX's own op (before install_cpu_kernels() replaced it): the tests' reference."""
    return _ORIGINAL.get(name) or getattr(mx, name)
