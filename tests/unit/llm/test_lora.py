"""The batch's adapters stage (deployments/llm/lora.py) on the tiny model, against mlx-lm's own
LoRA and DoRA layers: one adapter alone computes exactly what `load_adapters` makes of the model,
and a batch mixing adapters of different ranks and layers and the base model gives every row the
output its own adapter's model gives it. Adapters here are mlx-lm's layers with random weights
(trained ones are tested through the engine: test_lora_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten
from mlx_lm import load
from mlx_lm.tuner.utils import linear_to_lora_layers, load_adapters

from deployments.llm.adapter_files import load_layout
from deployments.llm.lora import AdapterChange, AdapterStage, layer_class, linear_layers
from deployments.protocol.errors import APIError


def make_adapter(model_dir: Path, out: Path, rank: int, kind: str = "lora", keys=None, num_layers: int = 2, seed=0):
    """An adapter in mlx-lm's files: its LoRA layers on the model, with random B (mlx-lm starts
    it at zero) and DoRA magnitudes moved off the weights' norms, so each adapter matters."""
    model, _ = load(str(model_dir))
    mx.random.seed(seed)
    params = {"rank": rank, "scale": 2.0, "dropout": 0.0, **({"keys": keys} if keys else {})}
    linear_to_lora_layers(model, num_layers, params, use_dora=kind == "dora")
    weights = {}
    for name, value in tree_flatten(model.parameters()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("lora_a", "lora_b", "m"):
            noise = 0.05 * mx.random.normal(value.shape)
            weights[name] = (value + noise) if leaf != "lora_b" else noise
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "adapters.safetensors"), weights)
    config = {"fine_tune_type": kind, "num_layers": num_layers, "lora_parameters": params}
    (out / "adapter_config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def adapters(tiny_llm_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return {
        "r4": make_adapter(tiny_llm_dir, root / "r4", 4, seed=1),
        "r8-qv": make_adapter(tiny_llm_dir, root / "r8", 8, keys=["self_attn.q_proj", "self_attn.v_proj"], seed=2),
        "dora": make_adapter(tiny_llm_dir, root / "dora", 2, kind="dora", num_layers=1, seed=3),
    }


def reference(model_dir, adapter_dir):
    model, _ = load(str(model_dir))
    if adapter_dir is not None:
        load_adapters(model, str(adapter_dir))
    return model


class Row:
    def __init__(self, adapter: int):
        self.adapter = adapter


def staged(model_dir, adapters):
    model, _ = load(str(model_dir))
    stage = AdapterStage(model)
    layers = linear_layers(model)
    slots = {name: stage.add(load_layout(name, str(d), None, layers, "tiny", 64))[0] for name, d in adapters.items()}
    return model, stage, slots


TOKENS = mx.array([[5, 6, 7, 8, 9, 10, 11]] * 4)


def test_one_adapter_alone_is_mlx_lms_own_layer(tiny_llm_dir, adapters):
    model, stage, slots = staged(tiny_llm_dir, adapters)
    for name, directory in adapters.items():
        stage.bind([Row(slots[name])] * 2)
        assert mx.array_equal(model(TOKENS[:2]), reference(tiny_llm_dir, directory)(TOKENS[:2])), name


def test_a_mixed_batch_gives_each_row_its_own_adapters_output(tiny_llm_dir, adapters):
    """Base, rank 4 (every projection), rank 8 (q and v only) and DoRA rank 2 in one forward:
    each row equals what its own adapter's model gives it in a forward of the same shape."""
    model, stage, slots = staged(tiny_llm_dir, adapters)
    names = [None, "r4", "r8-qv", "dora"]
    stage.bind([Row(slots[n] if n else 0) for n in names])
    mixed = model(TOKENS)
    for i, name in enumerate(names):
        expected = reference(tiny_llm_dir, adapters[name] if name else None)(TOKENS)[i]
        assert mx.array_equal(mixed[i], expected), name
    assert not mx.array_equal(mixed[0], mixed[1])  # the adapters do change the answer
    # A row's slot indexes every wrapped layer, whether its adapter adapts the layer or not.
    layers = [m for _, m in model.named_modules() if isinstance(m, layer_class())]
    assert {m.stacks.a.shape[0] for m in layers} == {max(slots.values()) + 1}


def test_only_the_layers_an_adapter_adapts_are_wrapped(tiny_llm_dir, adapters):
    model, _ = load(str(tiny_llm_dir))
    before = linear_layers(model)
    stage = AdapterStage(model)
    stage.add(load_layout("r8-qv", str(adapters["r8-qv"]), None, before, "tiny", 64))
    wrapped = {p for p, m in model.named_modules() if isinstance(m, layer_class())}
    assert wrapped == set(load_layout("r8-qv", str(adapters["r8-qv"]), None).modules)
    assert linear_layers(model) == before  # the model's linear layers, as before


def test_a_removed_adapter_retires_until_its_rows_are_gone_and_its_slot_is_reused(tiny_llm_dir, adapters):
    model, _ = load(str(tiny_llm_dir))
    stage = AdapterStage(model)
    layers = linear_layers(model)
    first = stage.apply(AdapterChange(layout=load_layout("r4", str(adapters["r4"]), None, layers, "tiny", 64)), set())
    stage.check(first)
    stage.apply(AdapterChange(remove=first), in_use={first.slot})  # a row still runs on it
    assert stage.retiring and first.slot in stage.slots
    with pytest.raises(APIError, match="Adapter 'r4' was unloaded"):
        stage.check(first)  # no new request starts on it
    stage.sweep(in_use=set())
    assert not stage.slots
    again = stage.apply(AdapterChange(layout=load_layout("r4", str(adapters["r4"]), None, layers, "tiny", 64)), set())
    assert again.slot == first.slot and again.load_id != first.load_id
    with pytest.raises(APIError):
        stage.check(first)  # the old load's requests never run on the new one
    stage.bind([Row(again.slot)])
    assert mx.array_equal(model(TOKENS[:1]), reference(tiny_llm_dir, adapters["r4"])(TOKENS[:1]))
