"""The FFT convolution (deployments/kernels/fft_conv.py) gives MLX's own conv1d results, and
the dispatch uses it only where it is meant to (and only when switched on)."""

from __future__ import annotations

import itertools

import pytest

mx = pytest.importorskip("mlx.core")

from deployments.kernels import conv, fft_conv  # noqa: E402


def _rel_err(got, ref) -> float:
    assert got.shape == ref.shape
    return float(mx.abs(got - ref).max()) / max(1e-6, float(mx.abs(ref).max()))


# (length, channels in, channels out, taps, padding, dilation): Kokoro's generator shapes
# (k7/k11, dilation 1/3/5, "same" padding) at short lengths, and unpadded / odd ones where the
# last tile is partial or the output is shorter than one tile.
GRID = [
    (length, k, d, p)
    for length, k, d, p in itertools.product([64, 130, 301], [7, 11], [1, 3], ["same", 0, 2])
    if fft_conv.span(k, d) <= fft_conv.NFFT // 2
]


@pytest.mark.parametrize("length,kernel,dilation,padding", GRID)
def test_fft_conv1d_matches_mlx(length, kernel, dilation, padding):
    mx.random.seed(length + 10 * kernel + dilation)
    if padding == "same":
        padding = dilation * (kernel - 1) // 2
    x = mx.random.normal((2, length, 12))
    w = mx.random.normal((10, kernel, 12)) * 0.3
    ref = conv.original_op("conv1d")(x, w, 1, padding, dilation)
    assert _rel_err(fft_conv.fft_conv1d(x, w, padding, dilation), ref) < 1e-5


def test_fft_conv1d_at_kokoro_scale():
    """One of the generator's real convolutions: 11 taps, 128 channels, 2000 frames."""
    x = mx.random.normal((1, 2000, 128))
    w = mx.random.normal((128, 11, 128)) / 30
    ref = conv.original_op("conv1d")(x, w, 1, 5, 1)
    assert _rel_err(fft_conv.fft_conv1d(x, w, 5, 1), ref) < 1e-5


def test_use_fft_only_for_wide_stride_one_ungrouped():
    assert fft_conv.use_fft(11, 1, 1, 1, 1000) and fft_conv.use_fft(7, 1, 1, 1, 1000)
    assert fft_conv.use_fft(11, 1, 3, 1, 1000)
    assert not fft_conv.use_fft(3, 1, 1, 1, 1000)  # narrow: the GEMM is cheaper
    assert not fft_conv.use_fft(7, 1, 3, 1, 1000)  # products 2.4x fewer: measured no faster
    assert not fft_conv.use_fft(11, 2, 1, 1, 1000)  # strided
    assert not fft_conv.use_fft(11, 1, 1, 2, 1000)  # grouped
    assert not fft_conv.use_fft(11, 1, 5, 1, 1000)  # span 51: beyond a 64-sample tile's half
    assert not fft_conv.use_fft(11, 1, 1, 1, 10)  # shorter than one tile


def test_dispatch_takes_the_fft_path_only_when_enabled(monkeypatch):
    calls = []
    real = fft_conv.fft_conv1d
    monkeypatch.setattr(fft_conv, "fft_conv1d", lambda *a: calls.append(a) or real(*a))
    x, w = mx.random.normal((1, 200, 8)), mx.random.normal((8, 11, 8))
    ref = conv.original_op("conv1d")(x, w, 1, 5, 1)
    monkeypatch.setattr(conv, "_ENABLED", {"gemm_conv"})
    assert mx.array_equal(conv._conv1d_op(x, w, 1, 5, 1), ref) and not calls  # MLX's own op
    monkeypatch.setattr(conv, "_ENABLED", {"gemm_conv", "fft_conv"})
    assert _rel_err(conv._conv1d_op(x, w, 1, 5, 1), ref) < 1e-5 and len(calls) == 1


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, {"gemm_conv", "fft_conv", "kokoro", "llm_attention", "llm_norms"}),
        ("all", {"gemm_conv", "fft_conv", "kokoro", "llm_attention", "llm_norms"}),
        ("none", set()),
        ("gemm_conv, kokoro", {"gemm_conv", "kokoro"}),
    ],
)
def test_enabled_kernels_from_the_environment(monkeypatch, value, expected):
    monkeypatch.delenv(conv.KERNELS_ENV, raising=False)
    if value is not None:
        monkeypatch.setenv(conv.KERNELS_ENV, value)
    assert conv.enabled_kernels() == expected


def test_unknown_kernel_name_is_an_error():
    with pytest.raises(ValueError, match="fast_conv"):
        conv.enabled_kernels("gemm_conv,fast_conv")


def test_none_installs_nothing(monkeypatch):
    monkeypatch.setenv(conv.KERNELS_ENV, "none")
    try:
        assert conv.install_cpu_kernels() is False
        assert mx.conv1d is conv.original_op("conv1d") and not conv.is_enabled("fft_conv")
    finally:
        conv.uninstall_cpu_kernels()
