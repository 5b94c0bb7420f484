"""The built-in tiny LLM: deterministic, in mlx-lm's real format, loadable by mlx_lm.load."""

import hashlib
import json

from deployments.llm.tiny_model import TINY_LLM_ID, ensure_tiny_llm


def _digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def test_generation_is_deterministic_and_reused(tiny_llm_dir, tmp_path):
    other = ensure_tiny_llm(tmp_path)
    assert _digest(other) == _digest(tiny_llm_dir)
    mtime = (other / "model.safetensors").stat().st_mtime
    assert ensure_tiny_llm(tmp_path) == other  # second call reuses the cache
    assert (other / "model.safetensors").stat().st_mtime == mtime
    assert TINY_LLM_ID in other.name


def test_files_are_a_hugging_face_checkpoint(tiny_llm_dir):
    names = {p.name for p in tiny_llm_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((tiny_llm_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3"
    assert "<|im_start|>" in json.loads((tiny_llm_dir / "tokenizer_config.json").read_text())["chat_template"]


def test_loads_with_mlx_lm_and_knows_its_markers(tiny_llm_dir, tiny_tokenizer):
    import mlx_lm

    model, tokenizer = mlx_lm.load(str(tiny_llm_dir))
    assert tokenizer.has_thinking and tokenizer.think_start == "<think>"
    assert tokenizer.has_tool_calling and tokenizer.tool_call_start == "<tool_call>"
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True)
    text = mlx_lm.generate(model, tokenizer, prompt=ids, max_tokens=5)
    assert isinstance(text, str)
