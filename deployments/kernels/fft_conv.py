"""Wide 1-D convolutions through the FFT (overlap-save), for MLX's CPU backend.

Kokoro's iSTFTNet generator runs 7- and 11-tap convolutions (some dilated) over 128-256
channels at 4800 frames a second of speech: by the profile in docs/performance.md most of a
synthesis is these products. As direct GEMMs they cost `taps` multiply-adds per output and
channel pair. Here the input is cut into overlapping tiles of `nfft` samples, each tile and the
kernel go to the frequency domain, and the channel mixing is one complex product per frequency
bin, done as a real GEMM on [real | imag] blocks: 4 * (nfft/2 + 1) / (nfft - span + 1)
multiply-adds per output and channel pair (2.4 for an 11-tap kernel in 64-sample tiles, 4.5x
fewer than direct). Float32 FFTs of 64 points keep the result within ~1e-6 of the direct sum
(tests/unit/kernels/test_fft_conv.py).

Used by deployments/kernels/conv.py for stride-1, ungrouped convolutions whose span
(dilation * (taps - 1) + 1) fits half a 64-sample tile and whose saving is large enough to pay
for the transforms (`use_fft`).
"""

from __future__ import annotations

import mlx.core as mx

NFFT = 64
# The FFT path's transforms, transposes and complex assembly cost about as much again as its
# products: measured on Kokoro's shapes (docs/performance.md, "Profiles") it won where the
# products alone are >= 2.8x fewer (11 taps: 2.3x faster; 7 taps: 1.2-1.8x; 11 taps dilated 3:
# 1.3x) and lost at 2.4x and below (7 taps dilated 3 or 5: 0.8-1.1x).
MIN_GAIN = 2.5


def span(kernel: int, dilation: int) -> int:
    return dilation * (kernel - 1) + 1


def product_gain(kernel: int, dilation: int, nfft: int = NFFT) -> float:
    """Direct multiply-adds per output and channel pair over the FFT path's: K / (4 bins / m)."""
    step = nfft - span(kernel, dilation) + 1
    return kernel * step / (4 * (nfft // 2 + 1)) if step > 0 else 0.0


def use_fft(kernel: int, stride: int, dilation: int, groups: int, length_out: int) -> bool:
    """Whether `fft_conv1d` is the faster way (measured on Kokoro's shapes, see MIN_GAIN)."""
    return (
        stride == 1
        and groups == 1
        and length_out >= NFFT
        and span(kernel, dilation) <= NFFT // 2
        and product_gain(kernel, dilation) >= MIN_GAIN
    )


def _kernel_spectrum(weight: mx.array, dilation: int, nfft: int) -> mx.array:
    """The block matrix [[Re W*, Im W*], [-Im W*, Re W*]] per bin, W* the conjugate spectrum of
    the dilated kernel: (bins, 2 C_in, 2 C_out), so [Re X | Im X] @ it = [Re XW* | Im XW*]."""
    c_out, kernel, c_in = weight.shape
    taps = weight.transpose(1, 2, 0)  # (K, C_in, C_out)
    if dilation > 1:  # the dilated kernel: each tap followed by dilation-1 zeros
        gaps = mx.zeros((kernel, dilation - 1, c_in, c_out), dtype=weight.dtype)
        taps = mx.concatenate([taps[:, None], gaps], axis=1).reshape(kernel * dilation, c_in, c_out)
    taps = taps[: span(kernel, dilation)]
    taps = mx.pad(taps, [(0, nfft - taps.shape[0]), (0, 0), (0, 0)])
    spectrum = mx.fft.rfft(taps, axis=0)  # (bins, C_in, C_out)
    real, imag = mx.real(spectrum), -mx.imag(spectrum)  # conjugate: correlation, as conv1d is
    top = mx.concatenate([real, imag], axis=2)
    bottom = mx.concatenate([-imag, real], axis=2)
    return mx.concatenate([top, bottom], axis=1)


def fft_conv1d(x: mx.array, weight: mx.array, padding: int = 0, dilation: int = 1, nfft: int = NFFT) -> mx.array:
    """Same result as `mx.conv1d(x, weight, 1, padding, dilation)` (x (N, L, C_in), weight
    (C_out, K, C_in)), by overlap-save: tile t covers input [t*m, t*m + nfft) and gives outputs
    [t*m, t*m + m), m = nfft - span + 1 (the circular correlation's alias-free part)."""
    n, _, c_in = x.shape
    c_out, kernel, _ = weight.shape
    width = span(kernel, dilation)
    step = nfft - width + 1
    if padding:
        x = mx.pad(x, [(0, 0), (padding, padding), (0, 0)])
    length_out = x.shape[1] - width + 1
    tiles = -(-length_out // step)
    needed = (tiles - 1) * step + nfft
    x = mx.pad(x, [(0, 0), (0, needed - x.shape[1]), (0, 0)])
    frames = mx.as_strided(x, (n, tiles, nfft, c_in), (needed * c_in, step * c_in, c_in, 1))
    spectrum = mx.fft.rfft(frames, axis=2)  # (N, T, bins, C_in)
    bins = spectrum.shape[2]
    spectrum = spectrum.transpose(2, 0, 1, 3).reshape(bins, n * tiles, c_in)
    product = mx.concatenate([mx.real(spectrum), mx.imag(spectrum)], axis=2) @ _kernel_spectrum(
        weight, dilation, nfft
    )  # (bins, N*T, 2 C_out)
    product = product[..., :c_out] + 1j * product[..., c_out:]
    product = product.reshape(bins, n, tiles, c_out).transpose(1, 2, 0, 3)
    y = mx.fft.irfft(product, n=nfft, axis=2)[:, :, :step, :]  # (N, T, m, C_out)
    return y.reshape(n, tiles * step, c_out)[:, :length_out, :].astype(x.dtype)
