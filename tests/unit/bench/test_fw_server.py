"""bench/fw_server.py, the faster-whisper peer: its HTTP surface and the decoding it asks for
(greedy, English, temperature 0 without fallback, timestamps on: the graph's Whisper decoding)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient  # noqa: E402

from bench import fw_server  # noqa: E402


class FakeWhisperModel:
    def __init__(self):
        self.calls = []

    def transcribe(self, audio, **options):
        self.calls.append((audio, options))
        segments = iter([SimpleNamespace(text=" Hello"), SimpleNamespace(text=" world.")])
        return segments, SimpleNamespace(language="en")


def test_transcribes_an_upload_with_the_graphs_decoding():
    from deployments.audio.encode import encode_wav

    model = FakeWhisperModel()
    client = TestClient(fw_server.app(model))
    wav = encode_wav(np.zeros(8000, dtype=np.float32), 16000)
    r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav, "audio/wav")})
    assert r.status_code == 200 and r.json() == {"text": "Hello world."}
    audio, options = model.calls[0]
    assert audio.dtype == np.float32 and len(audio) == 8000  # decoded at 16 kHz by the graph's decoder
    assert options == {
        "language": "en",
        "beam_size": 1,
        "temperature": 0.0,
        "condition_on_previous_text": False,
        "vad_filter": False,
        "without_timestamps": False,
    }
    assert client.get("/v1/models").json()["data"][0]["id"] == "whisper-tiny.en"


def test_missing_file_is_a_400_with_an_openai_error():
    r = TestClient(fw_server.app(FakeWhisperModel())).post("/v1/audio/transcriptions", data={"model": "x"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
