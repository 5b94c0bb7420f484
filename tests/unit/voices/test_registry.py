"""Voice registry and resolution: names, aliases, case, presets, traversal attempts, atomic writes."""

import json
import os
from pathlib import Path

import pytest

from deployments.voices.registry import (
    RegistryData,
    RegistryError,
    VoiceEntry,
    VoiceNotFound,
    VoiceRegistry,
    check_voice_name,
    list_voices,
    resolve_voice,
    safe_voice_file,
)

PRESETS = ["alba", "marius"]


@pytest.fixture
def registry(tmp_path):
    return RegistryData.parse(
        json.dumps(
            {
                "default_voice": "doubao",
                "models_base_path": str(tmp_path),
                "voices": {
                    "doubao": {"ref_audio": "doubao.wav", "ref_text": "hi", "aliases": ["default_cn", "DB"]},
                    "Marc": {"ref_audio": "~/marc.wav", "ref_text": "", "aliases": ["host"], "speed_factor": 1.1},
                    "zed": {"ref_audio": "/abs/zed.wav", "ref_text": "", "aliases": ["host"]},
                },
            }
        )
    )


def test_registry_name_case_insensitive_and_paths(registry, tmp_path):
    v = resolve_voice("DOUBAO", registry, PRESETS)
    assert (v.name, v.source, v.ref_audio, v.ref_text) == ("doubao", "registry", tmp_path / "doubao.wav", "hi")
    marc = resolve_voice("marc", registry, PRESETS)
    assert marc.ref_audio == Path("~/marc.wav").expanduser() and marc.speed_factor == 1.1
    assert resolve_voice("zed", registry, PRESETS).ref_audio == Path("/abs/zed.wav")


def test_aliases_case_insensitive_first_alphabetical(registry):
    assert resolve_voice("db", registry, PRESETS).name == "doubao"
    assert resolve_voice("HOST", registry, PRESETS).name == "Marc"  # "Marc" < "zed"


def test_default_voice(registry):
    for requested in (None, "", "default", "Default"):
        assert resolve_voice(requested, registry, PRESETS).name == "doubao"
    assert resolve_voice(None, RegistryData(), PRESETS).name == "alba"


def test_presets_after_registry(registry):
    v = resolve_voice("Marius", registry, PRESETS)
    assert (v.name, v.source, v.preset) == ("marius", "preset", "marius")


def test_unknown_voice_lists_names_and_never_falls_back(registry):
    with pytest.raises(VoiceNotFound) as e:
        resolve_voice("nobody", registry, PRESETS)
    assert e.value.available == ["Marc", "doubao", "zed", "alba", "marius"]
    assert "alba" in str(e.value)
    with pytest.raises(VoiceNotFound):
        resolve_voice(None, RegistryData(), [])


def test_files_only_inside_voices_dir(tmp_path):
    voices = tmp_path / "voices"
    (voices / "sub").mkdir(parents=True)
    (voices / "sub" / "me.wav").write_bytes(b"x")
    (tmp_path / "secret.wav").write_bytes(b"x")
    (voices / "link.wav").symlink_to(tmp_path / "secret.wav")
    assert safe_voice_file("sub/me.wav", voices) == (voices / "sub" / "me.wav").resolve()
    assert safe_voice_file(str(voices / "sub" / "me.wav"), voices) is not None
    for attempt in (
        "../secret.wav",
        "sub/../../secret.wav",
        "./sub/me.wav",
        str(tmp_path / "secret.wav"),
        "link.wav",
        "missing.wav",
        "/etc/passwd",
        "sub",
    ):
        assert safe_voice_file(attempt, voices) is None, attempt
    assert safe_voice_file("sub/me.wav", None) is None  # no TTS_VOICES_DIR: no files at all
    v = resolve_voice("sub/me.wav", RegistryData(), PRESETS, voices)
    assert v.source == "file"
    with pytest.raises(VoiceNotFound):
        resolve_voice("../secret.wav", RegistryData(), PRESETS, voices)


def test_listing(registry):
    body = list_voices(registry, PRESETS)
    assert body["default_voice"] == "doubao"
    assert [v["name"] for v in body["voices"]] == ["Marc", "doubao", "zed", "alba", "marius"]
    assert body["voices"][1] == {"name": "doubao", "aliases": ["default_cn", "DB"], "source": "registry"}
    assert body["voices"][-1] == {"name": "marius", "aliases": [], "source": "preset"}


def test_malformed_registry_is_an_error():
    for text in ("{", "[]", '{"voices": {"a": {"ref_text": "x"}}}', '{"voices": []}'):
        with pytest.raises(RegistryError):
            RegistryData.parse(text)


def test_registry_round_trip_and_reload_on_change(tmp_path):
    path = tmp_path / "cfg" / "voices.json"
    one, two = VoiceRegistry(path), VoiceRegistry(path)  # two replicas sharing the file
    assert one.data().voices == {}
    one.register("Guest", VoiceEntry(ref_audio="/a.wav", aliases=["g"]))
    assert two.data().find("G") == "Guest"
    two.register("guest", VoiceEntry(ref_audio="/b.wav"))  # same name, other case: replaced
    assert list(one.data().voices) == ["guest"]
    assert one.remove("GUEST").ref_audio == "/b.wav"
    assert two.data().voices == {} and two.remove("guest") is None
    assert json.loads(path.read_text())["voices"] == {}
    assert [p.name for p in path.parent.iterdir()] == ["voices.json"]  # no temp files left


def test_write_is_atomic_when_it_fails(tmp_path, monkeypatch):
    path = tmp_path / "voices.json"
    registry = VoiceRegistry(path)
    registry.register("keep", VoiceEntry(ref_audio="/k.wav"))
    before = path.read_text()

    def crash(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        registry.register("new", VoiceEntry(ref_audio="/n.wav"))
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["voices.json"]


@pytest.mark.parametrize("name", ["", "../x", "a/b", "default", " x", "x" * 65])
def test_bad_voice_names(name):
    with pytest.raises(RegistryError):
        check_voice_name(name)


KOKORO = ["af_alloy", "af_heart", "am_echo", "bf_emma"]
OPENAI = {"alloy": "af_alloy", "echo": "am_echo"}


def test_a_model_default_preset_and_preset_aliases():
    """Kokoro: no voice is af_heart (not the alphabetical first); OpenAI's names speak presets."""
    empty = RegistryData()
    assert resolve_voice(None, empty, KOKORO, None, "af_heart", OPENAI).preset == "af_heart"
    v = resolve_voice("Alloy", empty, KOKORO, None, "af_heart", OPENAI)
    assert (v.name, v.source, v.preset) == ("af_alloy", "preset", "af_alloy")
    with pytest.raises(VoiceNotFound):
        resolve_voice("alloy", empty, KOKORO)  # without the aliases (another model type)


def test_the_registry_wins_over_a_preset_alias(registry):
    registry.voices["alloy"] = VoiceEntry(ref_audio="alloy.wav")
    assert resolve_voice("alloy", registry, KOKORO, None, "af_heart", OPENAI).source == "registry"


def test_listing_shows_the_model_default_and_preset_aliases():
    body = list_voices(RegistryData(), KOKORO, "af_heart", OPENAI)
    assert body["default_voice"] == "af_heart"
    assert {"name": "af_alloy", "aliases": ["alloy"], "source": "preset"} in body["voices"]
    assert {"name": "bf_emma", "aliases": [], "source": "preset"} in body["voices"]
