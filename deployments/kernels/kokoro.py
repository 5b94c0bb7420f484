"""Kokoro's elementwise chains, fused, for MLX's CPU backend.

The profile of one synthesis (docs/performance.md, "Profiles") puts the second largest share,
after the generator's convolutions, in its AdaIN residual blocks' elementwise work: per block
and dilation, an instance norm (mean, variance, normalise: separate passes), the AdaIN scale
and shift, and Snake, `x + sin(a x)^2 / a`, over 128-256 channels at 4800 frames a second.
Eager MLX runs each op as its own pass, and its CPU `sin` is a scalar loop (~40 ns an element
measured here, against ~1-2 ns for an add). Here:

- `instance_norm(x)`: `mx.fast.layer_norm` over the time axis (the last one in mlx-audio's
  (N, C, L) layout), without affine: the same statistics in one fused kernel;
- `adain_snake(x, h, alpha)`: AdaIN (`(1 + gamma) * norm(x) + beta`, gamma and beta the two
  halves of `h`) and Snake in one `mx.compile`d kernel, with `sin(z)^2 = (1 - cos 2z) / 2` and
  the cosine as a polynomial after reducing 2z to [-pi, pi] (error < 1e-6 of |x|, checked
  against mlx-audio's own formula in tests/unit/kernels/test_kokoro_kernels.py).

`install()` puts them into mlx-audio's Kokoro classes (InstanceNorm1d and AdaINResBlock1, the
generator's residual block) on MLX's CPU backend; `uninstall()` restores them. The Kokoro
model hook (deployments/tts/model_hooks.py) installs them when `kokoro` is among
`OMINIX_CPU_KERNELS` (the default).
"""

from __future__ import annotations

import math
import threading

import mlx.core as mx

_TWO_PI = 2 * math.pi
# cos r = sum (-1)^k r^2k / (2k)!, to r^18: on |r| <= pi the first omitted term is pi^20/20! < 4e-9.
_COS_COEFFS = [(-1) ** k / math.factorial(2 * k) for k in range(10)]
_ORIGINAL: dict = {}
_LOCK = threading.Lock()
EPS = 1e-5  # mlx-audio's InstanceNorm1d default, as in PyTorch


def _cos(r: mx.array) -> mx.array:
    r2 = r * r
    acc = _COS_COEFFS[-1]
    for c in reversed(_COS_COEFFS[:-1]):
        acc = acc * r2 + c
    return acc


# 2 pi in two parts (Cody-Waite): k * _TWO_PI_HI is exact in float32 for |k| < 2^16, so the
# reduction loses no more than float32 rounding of k * _TWO_PI_LO even for large arguments
# (Snake's alpha * x reaches the hundreds); one constant lost ~1e-5 there.
_TWO_PI_HI = 6.28125  # 201/32: 8 significant bits
_TWO_PI_LO = _TWO_PI - _TWO_PI_HI


def sin_squared(z: mx.array) -> mx.array:
    """sin(z)^2 = (1 - cos 2z) / 2, with 2z reduced to [-pi, pi] and the cosine a polynomial."""
    z2 = 2 * z
    k = mx.round(z2 * (1 / _TWO_PI))
    r = (z2 - k * _TWO_PI_HI) - k * _TWO_PI_LO
    return 0.5 * (1 - _cos(r))


def instance_norm(x: mx.array, eps: float = EPS) -> mx.array:
    """Normalise each (batch, channel) row of x (N, C, L) over L: mean 0, variance 1."""
    return mx.fast.layer_norm(x, None, None, eps)


def _adain_snake(x: mx.array, h: mx.array, alpha: mx.array) -> mx.array:
    gamma, beta = mx.split(h[..., None], 2, axis=1)
    y = (1 + gamma) * instance_norm(x) + beta
    return y + sin_squared(alpha * y) / alpha


adain_snake = mx.compile(_adain_snake)


def snake_reference(x: mx.array, alpha: mx.array) -> mx.array:
    """mlx-audio's Snake1D, as written in its AdaINResBlock1 (the tests' reference)."""
    return x + (1 / alpha) * (mx.sin(alpha * x) ** 2)


# ---------------------------------------------------------------------------------- patches


def _apply_instance_norm(self, input):
    if self.affine or self.track_running_stats or input.ndim != 3:
        return _ORIGINAL["InstanceNorm1d"](self, input)
    return instance_norm(input, self.eps)


def _resblock_call(self, x: mx.array, s: mx.array) -> mx.array:
    """mlx-audio's AdaINResBlock1.__call__ with each AdaIN + Snake pair as one fused kernel."""
    for c1, c2, n1, n2, a1, a2 in zip(self.convs1, self.convs2, self.adain1, self.adain2, self.alpha1, self.alpha2):
        xt = adain_snake(x, n1.fc(s), a1)
        xt = c1(xt.swapaxes(2, 1), mx.conv1d).swapaxes(2, 1)
        xt = adain_snake(xt, n2.fc(s), a2)
        xt = c2(xt.swapaxes(2, 1), mx.conv1d).swapaxes(2, 1)
        x = xt + x
    return x


def install() -> bool:
    """Patch mlx-audio's Kokoro modules on MLX's CPU backend (idempotent). Returns whether they are."""
    with _LOCK:
        if _ORIGINAL:
            return True
        if mx.default_device().type != mx.DeviceType.cpu:
            return False
        from mlx_audio.tts.models.kokoro import istftnet

        _ORIGINAL["InstanceNorm1d"] = istftnet.InstanceNorm1d._apply_instance_norm
        _ORIGINAL["AdaINResBlock1"] = istftnet.AdaINResBlock1.__call__
        istftnet.InstanceNorm1d._apply_instance_norm = _apply_instance_norm
        istftnet.AdaINResBlock1.__call__ = _resblock_call
        return True


def uninstall() -> None:
    with _LOCK:
        if not _ORIGINAL:
            return
        from mlx_audio.tts.models.kokoro import istftnet

        istftnet.InstanceNorm1d._apply_instance_norm = _ORIGINAL.pop("InstanceNorm1d")
        istftnet.AdaINResBlock1.__call__ = _ORIGINAL.pop("AdaINResBlock1")
