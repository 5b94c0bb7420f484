"""TTS_REF_AUDIO: the start-up voice every TTS replica adds to the registry it resolves from
(pure: the overlay, its name, the config check and the env variable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.env import ConfigError
from deployments.voices.registry import (
    RegistryData,
    VoiceEntry,
    list_voices,
    resolve_voice,
    startup_voice_name,
    with_startup_voice,
)
from graphs.config import GraphArgs


def test_the_startup_voice_is_the_default_and_resolves_by_name():
    registry = RegistryData(default_voice="doubao", voices={"doubao": VoiceEntry(ref_audio="/v/doubao.wav")})
    seen = with_startup_voice(registry, Path("/srv/audio/reference.wav"), "hello")
    for requested in (None, "", "default", "Reference"):
        voice = resolve_voice(requested, seen, presets=["alba"])
        assert (voice.name, voice.ref_audio, voice.ref_text) == ("reference", Path("/srv/audio/reference.wav"), "hello")
    assert resolve_voice("doubao", seen, presets=[]).name == "doubao"  # the registry's voices stay
    assert registry.default_voice == "doubao" and "reference" not in registry.voices  # the file's data untouched
    listed = list_voices(seen, ["alba"])
    assert listed["default_voice"] == "reference"
    assert {"name": "reference", "aliases": [], "source": "startup"} in listed["voices"]


def test_it_replaces_a_registry_voice_of_the_same_name_and_is_never_written():
    registry = RegistryData(voices={"REFERENCE": VoiceEntry(ref_audio="/old.wav")})
    seen = with_startup_voice(registry, Path("/new/reference.wav"), None)
    assert list(seen.voices) == ["reference"] and seen.voices["reference"].ref_audio == "/new/reference.wav"
    assert "source" not in seen.voices["reference"].to_json()


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("reference.wav", "reference"),
        ("my voice (1).flac", "my_voice__1_"),
        ("default.wav", "reference"),
        ("_.wav", "reference"),
    ],
)
def test_names_come_from_the_file(file, name):
    assert startup_voice_name(Path(file)) == name


def test_the_env_variable_sets_it_and_a_missing_file_stops_start_up(tmp_path):
    ref = tmp_path / "reference.wav"
    ref.write_bytes(b"RIFF")
    assert GraphArgs.from_args({}, environ={"TTS_REF_AUDIO": str(ref)}).tts.ref_audio == str(ref)
    with pytest.raises(ConfigError, match="TTS_REF_AUDIO"):
        GraphArgs.from_args({}, environ={"TTS_REF_AUDIO": str(tmp_path / "missing.wav")})
    with pytest.raises(ConfigError, match="TTS_REF_AUDIO"):
        GraphArgs.from_args({}, environ={"TTS_REF_AUDIO": "  "})
