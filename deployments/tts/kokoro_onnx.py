"""Kokoro-82M's int8 ONNX export -> the float32 PyTorch state dict mlx-audio's Kokoro loads.

The export (`kokoro-v1.0.int8.onnx`) keeps every weight of the PyTorch model, quantised:
- Linear layers run as MatMulInteger: int8 [in, out] with a zero point and a per-column scale
  (the `<node>_scales_mul` Mul multiplies the activation's scale by it); torch's weight is the
  transpose of the dequantised matrix.
- Convolutions run as ConvInteger: uint8 with a per-tensor `<weight>_scale` and the node's zero
  point. Weight norm is folded into them (and into the float ConvTranspose/Conv weights), so
  `weight_v = W`, `weight_g = ||W||` over every axis but 0 gives W back exactly.
- Embeddings are a Gather on int8 followed by DequantizeLinear.
- LSTMs are DynamicQuantizeLSTM: int8 W [dirs, in, 4H] and R with per-direction scales, B =
  [Wb | Rb], gates ordered i, o, f, c (torch: i, f, g, o).
- Biases, norms and Snake alphas are named float initializers.

Module names come from the node scopes (`/encoder/F0.1/conv1x1/Conv_quant` ->
`predictor.F0.1.conv1x1`): repeated calls (ALBERT's shared layer) carry `_N` suffixes, nested
list scopes repeat their parent (`cnn.0/cnn.0.0`), and `encoder.` stands for bert /
text_encoder / predictor. Every expected parameter must be filled exactly once (or
identically), with nothing left over; ALBERT's pooler, which the export drops and Kokoro never
uses, is zero-filled.

numpy and onnx only (no MLX, no Ray): `expected` shapes come from the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np

# torch LSTM gate blocks (i, f, g, o) taken from ONNX's (i, o, f, c)
_GATES_FROM_ONNX = (0, 2, 3, 1)
# Parameters the export does not contain and Kokoro does not use.
ZERO_FILLED = ("bert.pooler.weight", "bert.pooler.bias")


class ConversionError(Exception):
    """The ONNX file does not map onto the expected parameters; the message says how."""


def scope_module(node_name: str) -> str:
    """`/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant` -> `encoder.text_encoder.cnn.0.0`."""
    parts: list[str] = []
    for part in node_name.strip("/").split("/")[:-1]:
        part = re.sub(r"_\d+$", "", part)  # the Nth call of a shared module
        if parts and part.startswith(parts[-1] + "."):
            parts[-1] = part  # a list entry's scope repeats the list's
        else:
            parts.append(part)
    return ".".join(parts)


class _Targets:
    """The expected parameter names, and how ONNX module paths resolve onto them."""

    def __init__(self, expected: Mapping[str, tuple]):
        self.shapes = {k: tuple(v) for k, v in expected.items()}
        self.modules = {k.rsplit(".", 1)[0] for k in self.shapes}

    def module(self, onnx_path: str) -> str | None:
        if onnx_path.startswith("decoder.decoder."):
            candidates = ["decoder." + onnx_path[len("decoder.decoder.") :]]
        elif onnx_path.startswith("encoder."):
            rest = onnx_path[len("encoder.") :]
            candidates = [rest, "predictor." + rest]
        else:
            return None
        return next((c for c in candidates if c in self.modules), None)

    def param(self, onnx_name: str) -> str | None:
        module, _, leaf = onnx_name.rpartition(".")
        resolved = self.module(module) if module else None
        return f"{resolved}.{leaf}" if resolved else None


class _Graph:
    def __init__(self, model):
        from onnx import numpy_helper

        self.nodes = list(model.graph.node)
        self.init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.by_name = {n.name: n for n in self.nodes}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)

    def dequantize(self, q: str, scale, zero_point: str) -> np.ndarray:
        return (self.init[q].astype(np.float32) - self.init[zero_point].astype(np.float32)) * scale


class _Filler:
    def __init__(self, targets: _Targets):
        self.targets = targets
        self.out: dict[str, np.ndarray] = {}

    def put(self, name: str, value: np.ndarray, source: str) -> None:
        shape = self.targets.shapes.get(name)
        if shape is None:
            raise ConversionError(f"{source} maps to '{name}', which the model does not have")
        value = np.asarray(value, dtype=np.float32)
        if value.shape != shape:
            if value.size != int(np.prod(shape)):
                raise ConversionError(f"{source} -> '{name}': shape {value.shape}, expected {shape}")
            value = value.reshape(shape)
        previous = self.out.get(name)
        if previous is not None and not np.array_equal(previous, value):
            raise ConversionError(f"'{name}' filled twice with different values (last from {source})")
        self.out[name] = value

    def conv(self, module: str, weight: np.ndarray, source: str) -> None:
        """A folded (weight-normed) convolution weight, torch layout."""
        if f"{module}.weight_v" in self.targets.shapes:
            norm = np.sqrt((weight.astype(np.float64) ** 2).sum(axis=tuple(range(1, weight.ndim)), keepdims=True))
            self.put(f"{module}.weight_v", weight, source)
            self.put(f"{module}.weight_g", norm.astype(np.float32), source)
        else:
            self.put(f"{module}.weight", weight, source)


def _module_of(graph: _Graph, targets: _Targets, node) -> str:
    module = targets.module(scope_module(node.name))
    if module is None:
        raise ConversionError(f"ONNX node {node.name} ({node.op_type}) maps to no module of the model")
    return module


def _matmul_integer(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    scales = graph.by_name.get(node.name + "_scales_mul")
    if scales is None:
        raise ConversionError(f"no scale multiplication for {node.name}")
    w_scale = next(graph.init[i] for i in scales.input if i in graph.init)
    weight = graph.dequantize(node.input[1], w_scale, node.input[3])
    fill.put(f"{_module_of(graph, targets, node)}.weight", weight.T, node.name)


def _conv_integer(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    q = node.input[1]
    scale = graph.init[q[: -len("_quantized")] + "_scale"]
    fill.conv(_module_of(graph, targets, node), graph.dequantize(q, scale, node.input[3]), node.name)


def _float_conv(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    module = targets.module(scope_module(node.name))
    if module is None or node.input[1] not in graph.init:
        return  # the iSTFT's fixed bases: part of the export, not parameters
    fill.conv(module, graph.init[node.input[1]], node.name)


def _float_matmul(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    if node.input[1] in graph.init:
        fill.put(f"{_module_of(graph, targets, node)}.weight", graph.init[node.input[1]].T, node.name)


def _gather(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    q = node.input[0]
    if not q.endswith("_quantized") or q not in graph.init:
        return  # a shape computation
    dq = next(c for c in graph.consumers[node.output[0]] if c.op_type == "DequantizeLinear")
    name = targets.param(q[: -len("_quantized")])
    if name is None:
        raise ConversionError(f"embedding {q} maps to no parameter")
    fill.put(name, graph.dequantize(q, graph.init[dq.input[1]], dq.input[2]), node.name)


def _lstm(graph: _Graph, targets: _Targets, fill: _Filler, node) -> None:
    module = _module_of(graph, targets, node)
    x_q, h_q, bias = node.input[1], node.input[2], graph.init[node.input[3]]
    x_scale, x_zp, h_scale, h_zp = node.input[8:12]
    hidden4 = graph.init[x_q].shape[-1]

    def torch_gates(m: np.ndarray) -> np.ndarray:  # rows in ONNX gate order -> torch's
        blocks = np.split(m, 4, axis=0)
        return np.concatenate([blocks[g] for g in _GATES_FROM_ONNX], axis=0)

    for d, suffix in enumerate(("l0", "l0_reverse")):
        for kind, q, scale, zp in (("ih", x_q, x_scale, x_zp), ("hh", h_q, h_scale, h_zp)):
            w = (graph.init[q][d].astype(np.float32) - graph.init[zp][d]) * graph.init[scale][d]
            fill.put(f"{module}.weight_{kind}_{suffix}", torch_gates(w.T), node.name)
        fill.put(f"{module}.bias_ih_{suffix}", torch_gates(bias[d, :hidden4]), node.name)
        fill.put(f"{module}.bias_hh_{suffix}", torch_gates(bias[d, hidden4:]), node.name)


_HANDLERS = {
    "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer,
    "ConvTranspose": _float_conv,
    "Conv": _float_conv,
    "MatMul": _float_matmul,
    "Gather": _gather,
    "DynamicQuantizeLSTM": _lstm,
}


def convert(model, expected: Mapping[str, Iterable[int]]) -> dict[str, np.ndarray]:
    """`model`: a loaded onnx ModelProto. `expected`: torch parameter name -> shape.
    Returns every expected parameter as float32, or raises ConversionError."""
    graph, targets = _Graph(model), _Targets(expected)
    fill = _Filler(targets)
    for node in graph.nodes:
        handler = _HANDLERS.get(node.op_type)
        if handler is not None:
            handler(graph, targets, fill, node)
    for name, value in graph.init.items():
        if value.dtype == np.float32 and (param := targets.param(name)) in targets.shapes:
            fill.put(param, value, name)
    for name in ZERO_FILLED:
        if name in targets.shapes and name not in fill.out:
            fill.out[name] = np.zeros(targets.shapes[name], dtype=np.float32)
    missing = sorted(set(targets.shapes) - set(fill.out))
    if missing:
        raise ConversionError(f"{len(missing)} parameters not found in the ONNX file: {missing[:8]}")
    return fill.out
