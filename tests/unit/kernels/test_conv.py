"""The CPU convolution kernels (deployments/kernels/conv.py) give MLX's own results."""

from __future__ import annotations

import itertools

import pytest

mx = pytest.importorskip("mlx.core")

from deployments.kernels import conv as kernels  # noqa: E402


def _close(got, ref, atol=1e-4):
    assert got.shape == ref.shape
    assert float(mx.abs(got - ref).max()) <= atol * max(1.0, float(mx.abs(ref).max()))


# (length, kernel, stride, padding, dilation, groups): stride/dilation/padding combinations and
# the shapes Kokoro uses (dilated resblocks, strided noise convs, 1x1 projections).
CONV_GRID = [
    (length, k, s, p, d, g)
    for length, k, s, p, d, g in itertools.product([5, 16, 33], [1, 3, 7], [1, 2, 3], [0, 1, 3, 9], [1, 3, 5], [1, 2])
    if length + 2 * p - d * (k - 1) - 1 >= 0
]


@pytest.mark.parametrize("length,kernel,stride,padding,dilation,groups", CONV_GRID)
def test_conv1d_matches_mlx(length, kernel, stride, padding, dilation, groups):
    mx.random.seed(length * 1000 + kernel * 100 + stride * 10 + padding)
    x = mx.random.normal((2, length, 4))
    w = mx.random.normal((6, kernel, 4 // groups))
    ref = kernels.original_op("conv1d")(x, w, stride, padding, dilation, groups)
    _close(kernels.conv1d(x, w, stride, padding, dilation, groups), ref)


TRANSPOSE_GRID = [
    (length, k, s, p, d, op, g)
    for length, k, s, p, d, op, g in itertools.product(
        [1, 6, 17], [1, 3, 4, 12, 20], [1, 2, 6, 10], [0, 1, 3, 5], [1, 2], [0, 1], [1, 2]
    )
    if p <= d * (k - 1) and op < max(s, d) and (length - 1) * s - 2 * p + d * (k - 1) + op + 1 > 0
]


@pytest.mark.parametrize("length,kernel,stride,padding,dilation,output_padding,groups", TRANSPOSE_GRID)
def test_conv_transpose1d_matches_mlx(length, kernel, stride, padding, dilation, output_padding, groups):
    mx.random.seed(length * 1000 + kernel * 100 + stride * 10 + padding)
    x = mx.random.normal((2, length, 4))
    w = mx.random.normal((6, kernel, 4 // groups))
    args = (stride, padding, dilation, output_padding, groups)
    ref = kernels.original_op("conv_transpose1d")(x, w, *args)
    _close(kernels.conv_transpose1d(x, w, *args), ref)


@pytest.mark.parametrize("op", ["conv1d", "conv_transpose1d"])
def test_depthwise_matches_mlx(op):
    """Kokoro's upsampling `pool` is a depthwise transposed conv (groups = channels)."""
    x = mx.random.normal((1, 9, 5))
    w = mx.random.normal((5, 3, 1))
    args = (2, 1, 1, 5) if op == "conv1d" else (2, 0, 1, 1, 5)
    _close(getattr(kernels, op)(x, w, *args), kernels.original_op(op)(x, w, *args))


def test_install_routes_mlx_and_nn_layers_through_the_kernels():
    assert mx.default_device().type == mx.DeviceType.cpu  # the Linux CI backend
    import mlx.nn as nn

    layer = nn.Conv1d(4, 6, kernel_size=3, padding=2, dilation=2)
    up = nn.ConvTranspose1d(4, 6, kernel_size=4, stride=2, padding=1)
    x = mx.random.normal((1, 11, 4))
    before = (layer(x), up(x))
    try:
        assert kernels.install_cpu_kernels() and kernels.install_cpu_kernels()  # idempotent
        assert mx.conv1d is kernels._conv1d_op and mx.conv_transpose1d is kernels._conv_transpose1d_op
        _close(layer(x), before[0])
        _close(up(x), before[1])
    finally:
        kernels.uninstall_cpu_kernels()
    assert mx.conv1d is kernels.original_op("conv1d")


def test_undilated_ungrouped_conv1d_stays_mlx_own():
    """MLX runs those as a GEMM already: the wrapper gives exactly MLX's result."""
    x, w = mx.random.normal((1, 20, 8)), mx.random.normal((6, 3, 8))
    ref = kernels.original_op("conv1d")(x, w, 2, 1)
    assert mx.array_equal(kernels._conv1d_op(x, w, 2, 1), ref)


def test_unusual_arguments_fall_back_to_mlx():
    """Shapes the GEMM forms do not cover give exactly MLX's result (or its error)."""
    x = mx.random.normal((1, 3, 2))
    w = mx.random.normal((2, 5, 2))
    with pytest.raises(ValueError):
        kernels.original_op("conv1d")(x, w)
    with pytest.raises(ValueError):
        kernels._conv1d_op(x, w)
    w1 = mx.random.normal((2, 1, 2))  # padding beyond the kernel's span
    ref = kernels.original_op("conv_transpose1d")(x, w1, 2, 1)
    _close(kernels._conv_transpose1d_op(x, w1, 2, 1), ref)
