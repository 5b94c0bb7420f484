"""The ASR and TTS slots under the control plane, on the session's graph: /v1/models and
/v1/models/status show them, a load changes what a request without `model` gets, an unload
frees memory and answers 503 until a load brings the slot back.

Each test restores the shipped defaults, because the session's graph is shared."""

from __future__ import annotations

import numpy as np
import pytest

from tests.speech import encode, silence, speak, word_error_rate

REAL_ASR, TINY_ASR, TTS = "whisper-tiny.en", "ominix-tiny-whisper", "ominix-kokoro-82m"  # the shipped defaults
SENTENCE = "Please schedule the meeting for Tuesday afternoon."


@pytest.fixture(scope="module")
def speech_wav():
    return encode(np.concatenate([silence(0.3), speak(SENTENCE), silence(0.3)]), 16000, "wav")


def slot_status(http, slot):
    return http.get("/v1/models/status").json()["slots"][slot]


def transcribe(http, wav):
    """A transcription that names no model: the slot's current default answers."""
    r = http.post("/v1/audio/transcriptions", files={"file": ("s.wav", wav)}, data={"response_format": "json"})
    assert r.status_code == 200, r.text
    return r.json()["text"]


def load(http, model, slot):
    r = http.post("/v1/models/load", json={"model": model, "model_type": slot}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_audio_slots_are_listed_with_what_is_loaded(http):
    status = http.get("/v1/models/status").json()
    assert status["models"]["asr"] == REAL_ASR and status["models"]["tts"] == TTS
    for slot, model in (("asr", REAL_ASR), ("tts", TTS)):
        replicas = status["slots"][slot]["replicas"]
        assert replicas and all(model in r["loaded_models"] for r in replicas)
        assert all(r["memory"]["mlx_active_bytes"] > 0 for r in replicas)
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    assert cards[REAL_ASR]["type"] == "asr" and cards[REAL_ASR]["loaded"] is True
    assert cards[TTS]["type"] == "tts" and cards[TTS]["loaded"] is True
    ready = http.get("/readyz").json()
    assert ready["slots"]["asr"]["model"] == REAL_ASR and ready["slots"]["tts"]["ready"] is True


def test_loading_an_asr_model_changes_the_default_for_requests_without_model(http, speech_wav):
    assert word_error_rate(SENTENCE, transcribe(http, speech_wav)) <= 0.3  # real Whisper
    try:
        answer = load(http, TINY_ASR, "asr")
        assert {r["default_model"] for r in answer["replicas"]} == {TINY_ASR}
        assert slot_status(http, "asr")["default_model"] == TINY_ASR
        # The random-weight model answers now: whatever it says, it is not the sentence.
        assert word_error_rate(SENTENCE, transcribe(http, speech_wav)) > 0.5
        cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
        assert cards[TINY_ASR]["loaded"] is True
    finally:
        load(http, REAL_ASR, "asr")
    assert word_error_rate(SENTENCE, transcribe(http, speech_wav)) <= 0.3


def test_unloading_tts_frees_memory_and_answers_503_until_loaded(http):
    speech = {"model": TTS, "input": "Hello there.", "response_format": "wav"}
    assert http.post("/v1/audio/speech", json=speech).status_code == 200
    try:
        r = http.post("/v1/models/unload", json={"model_type": "tts"})
        assert r.status_code == 200, r.text
        freed = r.json()["unloaded"]["tts"]
        assert freed and all(f["freed_bytes"] > 0 for f in freed)
        assert all(rep["loaded_models"] == [] for rep in slot_status(http, "tts")["replicas"])
        ready = http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["slots"]["tts"]["ready"] is False
        assert ready.json()["slots"]["llm"]["ready"] is True  # other slots are untouched
        r = http.post("/v1/audio/speech", json={k: v for k, v in speech.items() if k != "model"})
        assert r.status_code == 503 and "/v1/models/load" in r.json()["error"]["message"]
    finally:
        load(http, TTS, "tts")
    assert http.get("/readyz").status_code == 200
    r = http.post("/v1/audio/speech", json=speech)
    assert r.status_code == 200 and r.content[:4] == b"RIFF"


@pytest.mark.parametrize(
    "body, status",
    [
        ({"model": "acme/whisper-huge", "model_type": "asr"}, 403),
        ({"model": "../../etc/passwd", "model_type": "tts"}, 400),
        ({"model": "/etc", "model_type": "asr"}, 400),
    ],
)
def test_audio_load_refusals(http, body, status):
    r = http.post("/v1/models/load", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"]
    assert slot_status(http, body["model_type"])["default_model"] in (REAL_ASR, TTS)
