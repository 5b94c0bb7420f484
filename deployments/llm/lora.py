"""Many LoRA adapters on one served model, mixed in one batch: the batch's `adapters` stage.

mlx-lm applies an adapter by replacing the model's linear layers with its own `LoRALinear`
(`y = linear(x) + scale * (x @ lora_a) @ lora_b`; `DoRALinear` also rescales each output by a
learned magnitude over the adapted weight's norm), one adapter per model. Here every linear
layer an adapter adapts becomes a `MultiLoRALinear`: it keeps the layer and, per loaded adapter,
that adapter's `lora_a`, `lora_b`, scale (and DoRA's gain, `m / ||W + scale * B^T A^T||`, computed
once at load since it depends on the weights only). Before every forward of the served model the
batch calls `bind(rows)` (deployments/llm/batch.py), and each layer then adds, per row, the
term of that row's adapter:

- every row on the base model (slot 0): nothing is added, the layer is the model's own;
- every row on one adapter: mlx-lm's own operations on that adapter's arrays, so the answer
  is the answer `mlx_lm.load(..., adapter_path=)` gives;
- rows on different adapters: the adapters' A and B stacked by slot, each row gathering its own
  with MLX's `gather_mm` (no per-row copy of the weights); a row on the base gathers zeros.
  Adapters of different ranks share the stacks, the smaller ones padded with zero columns
  (which add exact zeros).

Slots are numbered from 1; a free slot is reused. Layers are wrapped when an adapter first
adapts them and stay wrapped (with no adapter bound they add one Python branch), so a model
that never serves an adapter runs unchanged. Engine-thread only, like everything that touches
the model's arrays (deployments/engine_thread.py).

Exactness, where mlx-lm's layers differ from a shared base output: a DoRA adapter on a layer
with a bias or on quantized weights computes its base product as mlx-lm does (dense, without the
bias) when it is alone in the batch; mixed with others it rescales the layer's own output, which
differs from mlx-lm's in the last bits there (neither case occurs in mlx-lm's usual models'
projections, which carry no bias, served dense on the CPU backend).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.engine_thread import Message
from deployments.llm.adapter_files import AdapterLayout
from deployments.protocol.errors import APIError


@dataclass(frozen=True)
class AdapterRef:
    """One load of an adapter into an engine, as a request names it: its slot, the load's id
    (a slot is reused after a removal: a request for the old load must not run on the new one),
    and the prompt cache's namespace for it (its content's fingerprint)."""

    name: str
    slot: int
    load_id: int
    namespace: str


@dataclass(eq=False)
class AdapterChange(Message):
    """An engine inbox message, applied between two steps of the batch: load `layout` (answered
    with its AdapterRef), or remove `remove` (answered with None; a remove may be sent without
    waiting for the answer)."""

    layout: Optional[AdapterLayout] = None
    remove: Optional[AdapterRef] = None


@dataclass
class _Binding:
    """The rows of the forward about to run, as the layers read them: `uniform` when every row
    has the same slot (0: the base model), else `index`, each row's slot ([B] uint32)."""

    uniform: Optional[int] = 0
    index: Any = None
    scale: Any = None  # [B] float32, each row's adapter's scale (one for all of an adapter's layers)
    slots: tuple[int, ...] = ()


@dataclass
class _Term:
    """One adapter's arrays in one layer."""

    a: Any  # [input, rank]
    b: Any  # [rank, output]
    scale: float
    gain: Any = None  # DoRA: [output] float32; None for LoRA


@dataclass
class _Stacks:
    """A layer's terms by slot, and the same stacked for mixed batches (built on change)."""

    terms: dict[int, _Term] = field(default_factory=dict)
    a: Any = None  # [slots, input, max rank]
    b: Any = None  # [slots, max rank, output]
    gain: Any = None  # [slots, output] (1 where a slot has no DoRA term), or None: no DoRA term here
    dora: Any = None  # [slots] bool
    built: set = field(default_factory=set)  # the slots the stacks hold


def _linear_dims(linear: Any) -> tuple[int, int]:
    import mlx.nn as nn

    output_dims, input_dims = linear.weight.shape
    if isinstance(linear, nn.QuantizedLinear):
        input_dims = input_dims * 32 // linear.bits
    return int(input_dims), int(output_dims)


def _dense_weight(linear: Any):
    import mlx.core as mx
    import mlx.nn as nn

    if not isinstance(linear, nn.QuantizedLinear):
        return linear.weight
    return mx.dequantize(
        linear.weight, linear.scales, linear.biases, group_size=linear.group_size, bits=linear.bits, mode=linear.mode
    )


_LAYER_CLASS = None


def layer_class():
    """`MultiLoRALinear`, an mlx.nn.Module subclass defined on first use (MLX is imported
    lazily here, as in the rest of the batch core)."""
    global _LAYER_CLASS
    if _LAYER_CLASS is not None:
        return _LAYER_CLASS
    import mlx.core as mx
    import mlx.nn as nn

    class MultiLoRALinear(nn.Module):
        """A linear layer of the served model with the low-rank terms of the loaded adapters,
        each row of a batch with its own (the module docstring says how)."""

        def __init__(self, linear: nn.Module, binding: _Binding):
            super().__init__()
            self.linear = linear
            self.binding = binding  # plain objects: attributes, not parameters
            self.stacks = _Stacks()
            self.has_bias = "bias" in linear
            self.dense = not isinstance(linear, nn.QuantizedLinear)

        def __call__(self, x):
            y = self.linear(x)
            binding, stacks = self.binding, self.stacks
            if binding.uniform == 0 or not stacks.terms:
                return y
            if binding.uniform is not None:
                term = stacks.terms.get(binding.uniform)
                return y if term is None else self._one(x, y, term)
            return self._mixed(x, y, binding)

        def _one(self, x, y, t: _Term):
            """mlx-lm's LoRALinear / DoRALinear on this row block, operation for operation."""
            z = (x @ t.a) @ t.b
            if t.gain is None:
                return y + (t.scale * z).astype(x.dtype)
            if self.has_bias or not self.dense:
                y = x @ _dense_weight(self.linear).T
            out = (t.gain.astype(x.dtype)) * (y + (t.scale * z).astype(x.dtype))
            return out + self.linear.bias if self.has_bias else out

        def _mixed(self, x, y, binding: _Binding):
            s, index = self.stacks, binding.index
            xa = x if x.dtype == s.a.dtype else x.astype(mx.promote_types(x.dtype, s.a.dtype))
            z = mx.gather_mm(mx.gather_mm(xa, s.a, rhs_indices=index), s.b, rhs_indices=index)
            scale = binding.scale if z.dtype == mx.float32 else binding.scale.astype(z.dtype)
            out = y + (scale.reshape(-1, *([1] * (z.ndim - 1))) * z).astype(x.dtype)
            if s.gain is None:
                return out
            shape = (-1, *([1] * (out.ndim - 2)), out.shape[-1])
            gain = s.gain[index].astype(x.dtype).reshape(shape)
            if not self.has_bias:
                return gain * out  # a gain of exactly 1 leaves the other rows' outputs as they are
            bias = self.linear.bias
            dora = s.dora[index].reshape(-1, *([1] * (out.ndim - 1)))
            return mx.where(dora, gain * (out - bias) + bias, out)

        def restack(self, size: int) -> None:
            """The stacks for mixed batches, after a slot changed: `size` slots, as many as the
            stage's highest slot needs (a row's slot indexes every layer's stacks, adapted there
            or not: a slot this layer does not adapt is zeros)."""
            s = self.stacks
            if not s.terms:
                s.a = s.b = s.gain = s.dora = None
                return
            input_dims, output_dims = _linear_dims(self.linear)
            rank = max(t.a.shape[1] for t in s.terms.values())
            dtype = s.terms[max(s.terms)].a.dtype
            a = [mx.zeros((input_dims, rank), dtype=dtype)] * size
            b = [mx.zeros((rank, output_dims), dtype=dtype)] * size
            gain, dora = [None] * size, [False] * size
            for slot, t in s.terms.items():
                pad = rank - t.a.shape[1]
                a[slot] = mx.pad(t.a, [(0, 0), (0, pad)]) if pad else t.a
                b[slot] = mx.pad(t.b, [(0, pad), (0, 0)]) if pad else t.b
                gain[slot], dora[slot] = t.gain, t.gain is not None
            s.a, s.b = mx.stack(a), mx.stack(b)
            s.dora = mx.array(dora)
            if any(dora):
                ones = mx.ones((output_dims,), dtype=mx.float32)
                s.gain = mx.stack([g if g is not None else ones for g in gain])
            else:
                s.gain = None
            mx.eval(s.a, s.b, s.dora, *([] if s.gain is None else [s.gain]))

    _LAYER_CLASS = MultiLoRALinear
    return _LAYER_CLASS


def linear_layers(model: Any) -> dict[str, tuple[int, int]]:
    """The model's linear layers an adapter may adapt: module path -> (input, output) widths."""
    import mlx.nn as nn

    out = {}
    for path, module in model.named_modules():
        if isinstance(module, layer_class()):
            out[path] = _linear_dims(module.linear)
        elif isinstance(module, (nn.Linear, nn.QuantizedLinear)) and not path.endswith(".linear"):
            out[path] = _linear_dims(module)
    return out


def _module_at(model: Any, path: str) -> tuple[Any, str, Any]:
    """The parent of the module at `path`, its key there, and the module."""
    parent: Any = model
    parts = path.split(".")
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    key = parts[-1]
    child = parent[int(key)] if isinstance(parent, list) else parent[key]
    return parent, key, child


@dataclass
class _Slot:
    layout: AdapterLayout
    load_id: int
    retiring: bool = False  # removed while rows still ran on it: freed once they are gone


class AdapterStage:
    """The batch's `adapters` stage: the adapters loaded into one served model, by slot, and the
    rows of each forward bound to them (`bind`)."""

    def __init__(self, model: Any):
        self.model = model
        self._binding = _Binding()
        self._layers: dict[str, Any] = {}  # path -> its MultiLoRALinear
        self.slots: dict[int, _Slot] = {}
        self._next_load_id = 1

    # ------------------------------------------------------------------ loading

    def add(self, layout: AdapterLayout) -> tuple[int, int]:
        """Load an adapter (checked to fit by deployments/llm/adapter_files.py): its slot and a
        load id that names this load of it (a slot is reused after a removal)."""
        import mlx.core as mx

        weights = mx.load(str(layout.weights_file))
        slot = next(i for i in range(1, len(self.slots) + 2) if i not in self.slots)
        terms = {}
        for path in layout.modules:
            layer = self._layer(path)
            a, b = weights[f"{path}.lora_a"], weights[f"{path}.lora_b"]
            gain = None
            if layout.kind == "dora":
                gain = self._dora_gain(layer.linear, a, b, layout.scale, weights[f"{path}.m"])
            terms[path] = _Term(a, b, layout.scale, gain)
        mx.eval([t.a for t in terms.values()], [t.b for t in terms.values()])
        for path, term in terms.items():
            self._layers[path].stacks.terms[slot] = term
        load_id, self._next_load_id = self._next_load_id, self._next_load_id + 1
        self.slots[slot] = _Slot(layout, load_id)
        self._restack()
        self.forget_binding()
        return slot, load_id

    def _restack(self) -> None:
        """Every layer's stacks as large as the highest slot (layers an adapter does not adapt
        hold zeros for it), each built once per change."""
        size = max(self.slots, default=0) + 1
        for layer in self._layers.values():
            s = layer.stacks
            if s.terms and (s.a is None or s.a.shape[0] != size or set(s.terms) != s.built):
                layer.restack(size)
                s.built = set(s.terms)
            elif not s.terms and s.a is not None:
                layer.restack(size)
                s.built = set()

    @staticmethod
    def _dora_gain(linear, a, b, scale: float, m):
        """DoRA's per-output factor `m / ||W + scale * B^T A^T||`, as DoRALinear computes it."""
        import mlx.core as mx

        w = _dense_weight(linear)
        adapted = w + (scale * b.T) @ a.T
        gain = m / mx.linalg.norm(adapted, axis=1)
        mx.eval(gain)
        return gain

    def remove(self, slot: int) -> None:
        """Drop a slot's terms (its rows must have left the batch: the engine retires it first)."""
        entry = self.slots.pop(slot, None)
        if entry is None:
            return
        for path in entry.layout.modules:
            layer = self._layers.get(path)
            if layer is not None:
                layer.stacks.terms.pop(slot, None)
        self._restack()

    def _layer(self, path: str):
        layer = self._layers.get(path)
        if layer is None:
            parent, key, linear = _module_at(self.model, path)
            layer = layer_class()(linear, self._binding)
            if isinstance(parent, list):
                parent[int(key)] = layer
            else:
                parent[key] = layer
            self._layers[path] = layer
        return layer

    # ------------------------------------------------------------------ the engine's messages

    def apply(self, change: AdapterChange, in_use: set[int]) -> Optional[AdapterRef]:
        """Apply one change between steps. A removed adapter whose slot rows still use
        (`in_use`) is retired: it takes no new request, and its slot is freed by `sweep` once
        its last row has left the batch."""
        if change.layout is not None:
            layout = change.layout
            slot, load_id = self.add(layout)
            return AdapterRef(layout.name, slot, load_id, f"lora-{layout.fingerprint}")
        ref = change.remove
        entry = self.slots.get(ref.slot) if ref is not None else None
        if entry is not None and entry.load_id == ref.load_id:
            entry.retiring = True
            self.sweep(in_use)
        return None

    @property
    def retiring(self) -> bool:
        return any(s.retiring for s in self.slots.values())

    def sweep(self, in_use: set[int]) -> None:
        """Free the retired slots no row uses any more."""
        for slot in [i for i, s in self.slots.items() if s.retiring and i not in in_use]:
            self.remove(slot)
        self.forget_binding()

    def check(self, ref: AdapterRef) -> None:
        """A request may start on `ref` only while that load of the adapter is in its slot."""
        entry = self.slots.get(ref.slot)
        if entry is None or entry.load_id != ref.load_id or entry.retiring:
            raise APIError(503, f"Adapter '{ref.name}' was unloaded", "service_unavailable")

    # ------------------------------------------------------------------ each forward

    def bind(self, rows: list[Any]) -> None:
        """Before a forward of the served model: each row's adapter slot (`row.adapter`)."""
        b = self._binding
        if not self.slots:
            b.uniform, b.index, b.slots = 0, None, ()
            return
        slots = tuple(row.adapter for row in rows)
        if slots == b.slots:
            return
        b.slots = slots
        if all(s == slots[0] for s in slots):
            b.uniform, b.index = slots[0], None
        else:
            import mlx.core as mx

            b.uniform, b.index = None, mx.array(slots, dtype=mx.uint32)
            scales = [self.slots[s].layout.scale if s else 0.0 for s in slots]
            b.scale = mx.array(scales, dtype=mx.float32)

    def forget_binding(self) -> None:
        """After a slot changed: the next bind computes the rows' binding afresh."""
        self._binding.slots = ()
