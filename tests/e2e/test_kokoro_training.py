"""End to end: voice training on Kokoro, the shipped default TTS model, on the session graph.
A short espeak-ng clip (a voice none of Kokoro's stock voices is) is trained with a CI-sized fit
(six stock voices, three steps: the fewest in which the loss falls, as in
tests/unit/tts/test_kokoro_fit.py); the progress stream carries one loss per step; the new voice
is then spoken by name over HTTP and the WebSocket, the ASR slot understands it, and its speaker
embedding (GE2E, computed here) is closer to the clip than the nearest stock voice's on the same
text."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import soundfile as sf
import websockets

from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID
from deployments.audio_models.speaker_encoder import embed_utterance
from deployments.similarity import cosine
from tests.speech import encode, speak, word_error_rate

pytestmark = pytest.mark.slow

CLIP_TEXT = "I would like to book a table for two people at eight tonight, please."
SENTENCE = "Please schedule the meeting for Tuesday afternoon."
RATE = 24000
STEPS = 3
BASE_VOICES = ["am_adam", "am_echo", "am_michael", "am_onyx", "bm_george", "bm_lewis"]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return speak(CLIP_TEXT, RATE, "en-us+m3")


@pytest.fixture(scope="module")
def trained(http, reference) -> dict:
    """The voice `espeaker`, trained once for the module; the last progress event."""
    clip = base64.b64encode(encode(reference, RATE, "wav")).decode()
    body = {
        "voice_name": "espeaker",
        "audio": clip,
        "transcript": CLIP_TEXT,
        "quality": "fast",
        # A CI-sized fit: the male English stock voices only (the first job scores every
        # candidate, ~5-10 s each on 2 cores) and STEPS steps (~40 s of CPU each) instead of
        # `fast`'s FIT_STEPS["fast"].
        "steps": STEPS,
        "base_voices": BASE_VOICES,
    }
    r = http.post("/v1/voices/train", json=body, timeout=60)
    assert r.status_code == 200, r.text
    task_id = r.json()["task_id"]
    with http.stream("GET", "/v1/voices/train/progress", params={"task_id": task_id}, timeout=1800) as events:
        seen = [json.loads(line[6:]) for line in events.iter_lines() if line.startswith("data: ")]
    assert seen[-1]["stage"] == "complete", seen[-1]
    assert "style_fitting" in [e["stage"] for e in seen]
    return seen[-1]


def speech(http, voice: str) -> np.ndarray:
    r = http.post("/v1/audio/speech", json={"input": SENTENCE, "voice": voice, "response_format": "wav"}, timeout=300)
    assert r.status_code == 200, r.text
    samples, rate = sf.read(io.BytesIO(r.content), dtype="float32")
    assert rate == RATE
    return samples


def test_the_fit_reports_a_loss_per_step_and_beats_its_start(trained):
    losses = trained["losses"]
    assert [loss["step"] for loss in losses] == list(range(STEPS))
    assert all(0.0 < loss["loss"] < 1.0 for loss in losses)
    fit = trained["fit"]
    # On the fitting sentence, in the slot: the steps raised the similarity to the clip.
    assert fit["similarity"] > fit["start_similarity"], fit
    assert losses[-1]["loss"] < losses[0]["loss"], losses


def test_the_trained_voice_speaks_by_name_understood_and_closer_to_the_clip(http, client, trained, reference):
    samples = speech(http, "espeaker")
    text = client.audio.transcriptions.create(
        model=WHISPER_TINY_EN_ID, file=("speech.wav", encode(samples, RATE, "wav")), language="en"
    ).text
    assert word_error_rate(SENTENCE, text) <= 0.2, text
    # A sentence the fit never saw, durations Kokoro predicts for the voice: still closer to the
    # clip's speaker than the stock voice the fit started from.
    target = embed_utterance(reference, RATE)
    nearest = trained["fit"]["nearest_voice"]
    ours, theirs = (
        cosine(embed_utterance(samples, RATE), target),
        cosine(embed_utterance(speech(http, nearest), RATE), target),
    )
    assert ours > theirs, (ours, nearest, theirs)
    assert "espeaker" in [v["name"] for v in http.get("/v1/voices").json()["voices"]]


async def test_the_websocket_speaks_the_trained_voice(server, trained):
    url = server.replace("http://", "ws://") + "/ws/v1/tts"
    async with websockets.connect(url) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        start = {"event": "task_start", "voice_setting": {"voice_id": "espeaker"}, "audio_setting": {"format": "pcm"}}
        await ws.send(json.dumps(start))
        started = json.loads(await ws.recv())
        assert started["event"] == "task_started", started
        await ws.send(json.dumps({"event": "task_continue", "text": SENTENCE}))
        pcm = b""
        while not (msg := json.loads(await ws.recv()))["is_final"]:
            pcm += bytes.fromhex(msg["data"]["audio"])
    assert len(pcm) // 2 > RATE  # over a second of speech
