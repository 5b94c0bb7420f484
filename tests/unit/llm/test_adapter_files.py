"""Adapters on disk (deployments/llm/adapter_files.py): what mlx-lm's files say, and each reason
an adapter is refused, named in the message, before any tensor is loaded."""

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from deployments.llm.adapter_files import (
    AdapterError,
    check_fits,
    load_layout,
    read_header,
    read_layout,
    resolve_directory,
)

Q, V = "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"
MODEL = {Q: (64, 64), V: (64, 32), "model.layers.0.self_attn.q_proj": (64, 64)}


def write_adapter(directory, kind="lora", rank=4, modules=None, config_rank=None, extra=None):
    modules = modules or {Q: (64, 64), V: (64, 32)}
    tensors = {}
    for path, (i, o) in modules.items():
        tensors[f"{path}.lora_a"] = np.zeros((i, rank), dtype=np.float32)
        tensors[f"{path}.lora_b"] = np.ones((rank, o), dtype=np.float32)
        if kind == "dora":
            tensors[f"{path}.m"] = np.ones((o,), dtype=np.float32)
    tensors.update(extra or {})
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapters.safetensors"))
    config = {"fine_tune_type": kind, "num_layers": 2, "lora_parameters": {"rank": config_rank or rank, "scale": 8.0}}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    return directory


def no_repo(repo):
    raise FileNotFoundError(f"{repo} is not cached")


def test_the_layout_is_read_from_the_config_and_the_header_alone(tmp_path):
    layout = read_layout("style", write_adapter(tmp_path / "a", rank=4))
    assert (layout.kind, layout.rank, layout.scale) == ("lora", 4, 8.0)
    assert layout.modules[Q].input_dims == 64 and layout.modules[V].output_dims == 32
    assert not layout.modules[Q].magnitude
    dora = read_layout("dora", write_adapter(tmp_path / "d", kind="dora"))
    assert dora.kind == "dora" and dora.modules[Q].magnitude
    assert read_header(layout.weights_file)[f"{Q}.lora_a"] == ("F32", (64, 4))


def test_the_fingerprint_follows_the_content_not_the_name(tmp_path):
    one = read_layout("a", write_adapter(tmp_path / "one"))
    same = read_layout("b", write_adapter(tmp_path / "same"))
    other = read_layout("a", write_adapter(tmp_path / "other", rank=8))
    assert one.fingerprint == same.fingerprint != other.fingerprint


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda d: write_adapter(d, kind="full"), "full fine-tune"),
        (lambda d: write_adapter(d, kind="qlora"), "fine_tune_type 'qlora'"),
        (lambda d: write_adapter(d, rank=4, config_rank=8), "says rank 8, its tensors have rank 4"),
        (lambda d: write_adapter(d, extra={"model.embed.weight": np.zeros(3, np.float32)}), "not a LoRA tensor"),
        (lambda d: write_adapter(d, extra={f"{Q}.m": np.ones(64, np.float32)}), "magnitude"),
    ],
)
def test_files_that_are_not_one_adapter_are_refused_by_name(tmp_path, make, words):
    directory = make(tmp_path / "bad")
    with pytest.raises(AdapterError, match="Adapter 'bad'") as e:
        read_layout("bad", directory)
    assert words in str(e.value)


def test_a_truncated_weights_file_is_refused(tmp_path):
    directory = write_adapter(tmp_path / "t")
    (directory / "adapters.safetensors").write_bytes(b"\x10\x00")
    with pytest.raises(AdapterError, match="adapters.safetensors cannot be read"):
        read_layout("t", directory)


def test_a_directory_without_the_files_or_an_unknown_path_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        AdapterError, match=r"is not an mlx-lm adapter \(missing adapter_config.json, adapters.safetensors"
    ):
        resolve_directory("x", str(tmp_path / "empty"), no_repo)
    with pytest.raises(AdapterError, match="'x': 'owner/none' is neither a local directory.*not cached"):
        resolve_directory("x", "owner/none", no_repo)


def test_a_repo_id_is_found_through_the_hub_cache(tmp_path):
    directory = write_adapter(tmp_path / "snapshot")
    assert resolve_directory("x", "me/style", lambda repo: directory) == directory


def test_an_adapter_for_another_base_or_of_a_higher_rank_is_refused(tmp_path):
    layout = read_layout("style", write_adapter(tmp_path / "a"))
    check_fits(layout, MODEL, "base", max_rank=8)
    with pytest.raises(AdapterError, match="rank 4; this slot serves ranks up to 2"):
        check_fits(layout, MODEL, "base", max_rank=2)
    wider = {**MODEL, V: (64, 64)}
    with pytest.raises(AdapterError, match=f"'style' does not fit model 'base': {V} is 64 -> 64 wide there"):
        check_fits(layout, wider, "base", max_rank=8)
    lacking = {Q: (64, 64)}
    with pytest.raises(AdapterError, match=f"adapts {V}, which the model has no linear layer at"):
        check_fits(layout, lacking, "base", max_rank=8)
    with pytest.raises(AdapterError, match="does not fit"):
        load_layout("style", str(tmp_path / "a"), no_repo, wider, "base", 8)
