"""Kokoro's fused AdaIN + Snake kernels (deployments/kernels/kokoro.py) against mlx-audio's own
modules and formulas."""

from __future__ import annotations

import math

import pytest

mx = pytest.importorskip("mlx.core")
istftnet = pytest.importorskip("mlx_audio.tts.models.kokoro.istftnet")

from deployments.kernels import kokoro  # noqa: E402


def _max_diff(a, b) -> float:
    assert a.shape == b.shape
    return float(mx.abs(a - b).max())


def test_sin_squared_polynomial_matches_float64_sin_over_a_wide_range():
    np = pytest.importorskip("numpy")
    for bound, tol in ((2 * math.pi, 1e-6), (200, 2e-6), (5000, 2e-6)):
        z = mx.linspace(-bound, bound, 200_001)
        exact = np.sin(np.asarray(z).astype(np.float64)) ** 2  # of the float32 inputs themselves
        assert float(np.abs(np.asarray(kokoro.sin_squared(z)) - exact).max()) < tol, bound


def test_instance_norm_matches_mlx_audio():
    x = mx.random.normal((2, 16, 300)) * 3 + 1
    ref = istftnet.InstanceNorm1d(16)._apply_instance_norm(x)  # mlx-audio's, unpatched
    assert _max_diff(kokoro.instance_norm(x), ref) < 1e-5


def test_adain_snake_matches_adain_then_snake():
    mx.random.seed(3)
    adain = istftnet.AdaIN1d(32, 16)
    x = mx.random.normal((1, 16, 500)) * 2
    s = mx.random.normal((1, 32))
    alpha = mx.random.uniform(0.3, 3.0, (1, 16, 1))
    ref = kokoro.snake_reference(adain(x, s), alpha)
    assert _max_diff(kokoro.adain_snake(x, adain.fc(s), alpha), ref) < 1e-5


def test_installed_resblock_gives_mlx_audio_result():
    """The generator's AdaINResBlock1 with the fused kernels vs mlx-audio's own forward."""
    mx.random.seed(5)
    block = istftnet.AdaINResBlock1(16, 7, (1, 3, 5), style_dim=32)
    block.alpha1 = [mx.random.uniform(0.5, 2.0, (1, 16, 1)) for _ in range(3)]
    x = mx.random.normal((1, 16, 200))
    s = mx.random.normal((1, 32))
    installed_before = bool(kokoro._ORIGINAL)  # a Kokoro model loaded earlier in this process
    kokoro.uninstall()
    try:
        ref = block(x, s)
        assert kokoro.install() and kokoro.install()  # idempotent
        assert istftnet.AdaINResBlock1.__call__ is kokoro._resblock_call
        got = block(x, s)
        kokoro.uninstall()
        assert istftnet.AdaINResBlock1.__call__ is not kokoro._resblock_call
        assert _max_diff(got, ref) < 1e-4 * max(1.0, float(mx.abs(ref).max()))
        assert mx.array_equal(block(x, s), ref)  # uninstalled: mlx-audio's own again
    finally:
        if installed_before:
            kokoro.install()
