"""End to end: the voice registry round trip (GET/POST/DELETE /v1/voices) and the registry
file as the source of truth for every replica. The slot's default is Kokoro, which cannot
clone: requests that name no model and use a registry voice are spoken by the shipped
`clone_model` (the tiny pocket_tts, deterministic), which is what these requests exercise."""

from __future__ import annotations

import json

import numpy as np

from deployments.audio.encode import encode_wav
from deployments.tts.kokoro import KOKORO_TTS_ID
from deployments.tts.model_hooks import KOKORO_OPENAI_VOICES
from deployments.tts.tiny_model import TINY_TTS_ID, TINY_TTS_VOICES

TEXT = "Hello world. This is a test of the speech server!"


def tone_wav(freq: float, seconds: float = 1.0, rate: int = 22050) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    return encode_wav((0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


def speak(http, voice, model=None):
    body = {"input": TEXT, "voice": voice, "response_format": "pcm", **({"model": model} if model else {})}
    return http.post("/v1/audio/speech", json=body)


def registry_file(cache_dir):
    return cache_dir / "tts" / "voices.json"


def test_list_has_the_default_models_presets_and_default(http):
    body = http.get("/v1/voices").json()
    assert body["default_voice"] == "af_heart"  # Kokoro's own default, not its alphabetical first
    presets = {v["name"]: v for v in body["voices"] if v["source"] == "preset"}
    assert len(presets) == 54 and "bf_emma" in presets
    for alias, preset in KOKORO_OPENAI_VOICES.items():  # OpenAI's voice names speak Kokoro presets
        assert alias in presets[preset]["aliases"]


def test_a_registry_voice_on_a_model_that_cannot_clone_is_a_400(http):
    files = {"reference_audio": ("me.wav", tone_wav(250), "audio/wav")}
    assert http.post("/v1/voices", data={"name": "cloned"}, files=files).status_code == 201
    try:
        named = speak(http, "cloned", model=KOKORO_TTS_ID)  # named: no silent switch of model
        assert named.status_code == 400 and TINY_TTS_ID in named.json()["error"]["message"], named.text
        assert speak(http, "cloned", model=TINY_TTS_ID).content == speak(http, "cloned").content  # clone_model
    finally:
        http.delete("/v1/voices/cloned")


def test_register_use_and_delete(http, cache_dir):
    files = {"reference_audio": ("me.wav", tone_wav(250), "audio/wav")}
    data = {"name": "Narrator", "reference_text": "a tone", "aliases": "storyteller, Teller", "language": "en"}
    r = http.post("/v1/voices", data=data, files=files)
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "Narrator", "aliases": ["storyteller", "Teller"], "source": "registry"}

    listed = {v["name"]: v for v in http.get("/v1/voices").json()["voices"]}
    assert listed["Narrator"] == {
        "name": "Narrator",
        "aliases": ["storyteller", "Teller"],
        "source": "registry",
        "language": "en",
    }
    saved = json.loads(registry_file(cache_dir).read_text())
    assert saved["voices"]["Narrator"]["ref_text"] == "a tone"

    voice = speak(http, "narrator")
    assert voice.status_code == 200
    assert speak(http, "STORYTELLER").content == voice.content == speak(http, "teller").content
    assert voice.content not in (speak(http, p, TINY_TTS_ID).content for p in TINY_TTS_VOICES)

    assert http.delete("/v1/voices/storyteller").json() == {"name": "storyteller", "deleted": True}
    assert speak(http, "Narrator").status_code == 404
    assert http.delete("/v1/voices/Narrator").status_code == 404
    assert "Narrator" not in json.loads(registry_file(cache_dir).read_text())["voices"]


def test_registry_file_edits_are_seen_without_restart(http, cache_dir, tmp_path):
    """Another replica (or an operator) replaces the file: this replica uses it at once."""
    path = registry_file(cache_dir)
    ref = tmp_path / "guest.wav"
    ref.write_bytes(tone_wav(600))
    before = path.read_text() if path.exists() else None
    registry = {
        "default_voice": "guest",
        "models_base_path": str(tmp_path),
        "voices": {"guest": {"ref_audio": "guest.wav", "ref_text": "", "aliases": ["visitor"]}},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(registry))
    tmp.replace(path)
    try:
        assert http.get("/v1/voices").json()["default_voice"] == "guest"
        guest = speak(http, "Visitor")  # relative ref_audio resolves against models_base_path
        assert guest.status_code == 200
        assert speak(http, None).content == guest.content  # default_voice is used
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_text(before)


def test_registration_errors(http):
    wav = {"reference_audio": ("x.wav", tone_wav(300), "audio/wav")}
    cases = [
        ({"name": "../evil"}, wav, 400),
        ({"name": "default"}, wav, 400),
        ({"name": "af_heart"}, wav, 400),  # a preset of the default model
        ({"name": "ok"}, {"reference_audio": ("x.wav", b"not audio", "audio/wav")}, 400),
        ({"name": "ok"}, {"reference_audio": ("x.wav", tone_wav(300, seconds=0.01), "audio/wav")}, 400),
        ({"name": "ok"}, None, 400),
    ]
    for data, files, status in cases:
        r = http.post("/v1/voices", data=data, files=files)
        assert r.status_code == status, (data, r.text)
        assert r.json()["error"]["message"]
