"""The disk report groups models by the slot whose registry entry lists their type: VLM and
embeddings models under their own slot, not "llm"; a type no slot lists goes to the LLM."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from deployments.control.report import disk_report, slot_of
from deployments.slots import SLOTS


def model(root, name, config=None, subdir=None):
    path = root / name
    path.mkdir()
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    if subdir:
        (path / subdir).mkdir()
    return path


@pytest.mark.parametrize(
    "config, subdir, slot",
    [
        ({"model_type": "qwen2_vl"}, None, "vlm"),
        ({"model_type": "Qwen2_5_VL"}, None, "vlm"),
        ({"model_type": "bert"}, None, "embeddings"),
        ({"model_type": "whisper"}, None, "asr"),
        ({"model_type": "kokoro"}, None, "tts"),
        ({"model_type": "flux2"}, None, "image"),
        (None, "transformer", "image"),  # a diffusers repo: no config.json at its root
        ({"model_type": "qwen3"}, None, "llm"),
        ({"model_type": "some_new_architecture"}, None, "llm"),
        ({"family": "flux2-klein"}, None, None),  # no model_type
        (None, None, None),
    ],
)
def test_a_model_dir_belongs_to_the_slot_that_lists_its_type(tmp_path, config, subdir, slot):
    assert slot_of(model(tmp_path, "m", config, subdir), SLOTS.values()) == slot


def test_no_model_type_is_listed_by_two_slots():
    listed = Counter(t for slot in SLOTS.values() for t in slot.model_types)
    assert [t for t, n in listed.items() if n > 1] == []
    assert [s.name for s in SLOTS.values() if s.other_model_types] == ["llm"]


def no_cache():
    raise OSError("no Hugging Face cache here")


def test_the_report_groups_models_directories_by_slot(tmp_path, monkeypatch):
    monkeypatch.setattr("deployments.control.report.default_cache_dir", lambda: tmp_path / "none")
    monkeypatch.setattr("huggingface_hub.scan_cache_dir", no_cache)
    root = tmp_path / "models"
    root.mkdir()
    model(root, "vl", {"model_type": "qwen2_vl"})
    model(root, "minilm", {"model_type": "bert"})
    model(root, "chat", {"model_type": "qwen3"})
    report = disk_report({"llm": str(root)}, SLOTS.values())
    local = {
        slot: [e["path"] for e in entries if e["source"] == "models_dir"] for slot, entries in report["by_slot"].items()
    }
    assert local["vlm"] == [str(root / "vl")]
    assert local["embeddings"] == [str(root / "minilm")]
    assert local["llm"] == [str(root / "chat")]
