"""End to end: the built-in real TTS model Kokoro-82M, the shipped config's default TTS model, on
the session graph. Its speech is transcribed back by the graph's ASR slot (real Whisper tiny.en)
and must say what was asked (WER <= 0.1), over HTTP (named, and as the default a request without
model or voice gets) and over the WebSocket, where a multi-voice dialogue must come out in
distinct voices (told apart by the ASR slot's GE2E speaker diarization); OpenAI's voice names
speak Kokoro presets (in streamed mp3); captioned speech times every word; options it cannot
honour are 400s."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import soundfile as sf
import websockets

from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID
from deployments.tts.kokoro import KOKORO_TTS_ID
from deployments.tts.tiny_model import TINY_TTS_ID
from tests.speech import encode, word_error_rate

pytestmark = pytest.mark.slow

SENTENCE = "Please schedule the meeting for Tuesday afternoon. The quick brown fox jumps over the lazy dog."
SHORT = "Good morning, did you get my message?"
# A dialogue over one WebSocket session: the session voice, two others per message, the first again.
DIALOGUE = (
    (None, "Welcome back to the show, today we talk about the new library."),
    ("bm_george", "Thank you for having me, it is a pleasure to be here."),
    ("bf_emma", "I am glad to join the discussion as well this morning."),
    (None, "Let us start with the first question from our listeners."),
)
DIALOGUE_VOICE = "af_heart"


@pytest.fixture(scope="module", autouse=True)
def kokoro_loaded(http):
    """Kokoro is the slot's default, converted into the session's fresh cache and loaded when the
    graph started; a short request first, so a replica that scaled up since has it warm too."""
    r = http.post(
        "/v1/audio/speech", json={"model": KOKORO_TTS_ID, "input": "Hello.", "response_format": "pcm"}, timeout=600
    )
    assert r.status_code == 200, r.text


def transcribe(client, samples: np.ndarray, rate: int) -> str:
    result = client.audio.transcriptions.create(
        model=WHISPER_TINY_EN_ID,
        file=("speech.wav", encode(samples, rate, "wav")),
        language="en",
    )
    return result.text


# One named voice unlike the default (af_heart, the test below); af_heart and bm_george are
# transcribed back in process too (tests/unit/tts/test_kokoro.py).
@pytest.mark.parametrize("voice", ["am_michael"])
def test_speech_round_trip_through_the_graph(client, voice):
    audio = client.audio.speech.create(model=KOKORO_TTS_ID, voice=voice, input=SENTENCE, response_format="wav")
    samples, rate = sf.read(io.BytesIO(audio.content), dtype="float32")
    assert rate == 24000 and 3.0 < len(samples) / rate < 15.0
    text = transcribe(client, samples, rate)
    assert word_error_rate(SENTENCE, text) <= 0.1, text


def test_the_default_model_and_voice_speak_what_was_asked(client, http):
    """The README's first speech request: no model, no voice -> Kokoro's af_heart."""
    r = http.post("/v1/audio/speech", json={"input": SENTENCE})
    assert r.status_code == 200 and r.content[:4] == b"RIFF", r.text
    samples, rate = sf.read(io.BytesIO(r.content), dtype="float32")
    assert word_error_rate(SENTENCE, transcribe(client, samples, rate)) <= 0.1


def test_an_openai_voice_name_speaks_its_kokoro_preset_in_streamed_mp3(client):
    """mp3 (OpenAI's default format) streams; the bytes as the SDK reads them go to the ASR slot."""
    with client.audio.speech.with_streaming_response.create(
        model=KOKORO_TTS_ID, voice="onyx", input=SHORT, response_format="mp3"
    ) as response:
        assert response.headers["content-type"] == "audio/mpeg"
        mp3 = b"".join(response.iter_bytes())
    text = client.audio.transcriptions.create(model=WHISPER_TINY_EN_ID, file=("speech.mp3", mp3), language="en").text
    assert word_error_rate(SHORT, text) <= 0.1, text


def test_captioned_speech_streams_mp3_lines_with_every_word_timed(client, http):
    """Kokoro-FastAPI's /dev/captioned_speech: the lines' bytes join into one mp3 the ASR slot
    hears as the input, and their words are the input's, in order, within the audio."""
    body = {"model": KOKORO_TTS_ID, "input": SHORT, "response_format": "mp3"}
    with http.stream("POST", "/dev/captioned_speech", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert len(lines) >= 2 and {line["audio_format"] for line in lines} == {"audio/mpeg"}
    mp3 = b"".join(base64.b64decode(line["audio"]) for line in lines)
    words = [t for line in lines for t in line["timestamps"]]
    assert [t["word"] for t in words] == SHORT.replace(",", "").replace("?", "").split()
    seconds = len(sf.read(io.BytesIO(mp3))[0]) / 24000
    assert all(t["start_time"] < t["end_time"] for t in words) and words[-1]["end_time"] < seconds
    text = client.audio.transcriptions.create(model=WHISPER_TINY_EN_ID, file=("speech.mp3", mp3), language="en").text
    assert word_error_rate(SHORT, text) <= 0.1, text


def test_open_webuis_voice_and_model_menus_list_kokoros(http):
    """GET /v1/audio/voices and /v1/audio/models, the lists Open WebUI's OpenAI engine reads."""
    voices = http.get("/v1/audio/voices").json()["voices"]
    assert voices[0] == {"id": "af_heart", "name": "af_heart"} and len(voices) >= 54
    assert {"id": "am_onyx", "name": "am_onyx (onyx)"} in voices  # OpenAI's names speak presets
    assert {"id": KOKORO_TTS_ID} in http.get("/v1/audio/models").json()["models"]


def test_a_model_that_cannot_time_its_words_is_a_400(http):
    r = http.post("/dev/captioned_speech", json={"model": TINY_TTS_ID, "input": "Hello.", "stream": False})
    assert r.status_code == 400 and r.json()["error"]["param"] == "return_timestamps", r.text


def test_pcm_streams_sentence_by_sentence(http):
    with http.stream(
        "POST",
        "/v1/audio/speech",
        json={
            "model": KOKORO_TTS_ID,
            "voice": "af_heart",
            "input": SENTENCE,
            "response_format": "pcm",
        },
    ) as r:
        assert r.status_code == 200 and r.headers["x-audio-sample-rate"] == "24000"
        chunks = [c for c in r.iter_raw() if c]
    assert len(chunks) >= 2  # the first sentence is sent before the second is synthesized


def test_reference_audio_is_a_400_that_names_a_model_that_clones(http):
    tone = (0.3 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 220)).astype(np.float32)
    r = http.post(
        "/v1/audio/speech",
        json={
            "model": KOKORO_TTS_ID,
            "input": "Hello.",
            "reference_audio": base64.b64encode(encode(tone, 16000, "wav")).decode(),
        },
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "reference_audio" and TINY_TTS_ID in error["message"]


def test_a_language_kokoro_does_not_speak_is_a_400(http):
    r = http.post("/v1/audio/speech", json={"model": KOKORO_TTS_ID, "input": "Hello.", "language": "tlh"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "language", r.text


async def test_websocket_speaks_with_kokoro_voices(server, client):
    url = server.replace("http://", "ws://") + "/ws/v1/tts"
    async with websockets.connect(url) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        await ws.send(
            json.dumps(
                {
                    "event": "task_start",
                    "model": KOKORO_TTS_ID,
                    "voice_setting": {"voice_id": "bf_emma"},
                    "audio_setting": {"format": "pcm"},
                }
            )
        )
        started = json.loads(await ws.recv())
        assert started["event"] == "task_started" and started["sample_rate"] == 24000, started
        await ws.send(json.dumps({"event": "task_continue", "text": SENTENCE}))
        pcm = b""
        while not (msg := json.loads(await ws.recv()))["is_final"]:
            pcm += bytes.fromhex(msg["data"]["audio"])
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768
    text = transcribe(client, samples, 24000)
    assert word_error_rate(SENTENCE, text) <= 0.1, text


async def ws_turn(ws, text: str, voice: str | None) -> np.ndarray:
    """One task_continue (with a per-message voice, if any): its audio as float32 at 24 kHz."""
    await ws.send(json.dumps({"event": "task_continue", "text": text, **({"voice_id": voice} if voice else {})}))
    pcm = b""
    while not (msg := json.loads(await ws.recv()))["is_final"]:
        assert msg["event"] == "task_progress", msg
        pcm += bytes.fromhex(msg["data"]["audio"])
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768


def turn_speakers(segments: list[dict], spans: list[tuple[float, float]]) -> list[str]:
    """The diarization label that covers most of each turn."""

    def overlap(segment: dict, span: tuple[float, float]) -> float:
        return max(0.0, min(segment["end"], span[1]) - max(segment["start"], span[0]))

    return [max(segments, key=lambda s: overlap(s, span))["speaker"] for span in spans]


async def test_websocket_dialogue_switches_between_distinct_voices(server, client, http):
    """OminiX-API's per-message voice switching on Kokoro: each turn says its text, and the
    graph's own speaker diarization (GE2E embeddings) hears three speakers, the session voice
    returning as the same one."""
    url = server.replace("http://", "ws://") + "/ws/v1/tts"
    async with websockets.connect(url) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        start = {
            "event": "task_start",
            "voice_setting": {"voice_id": DIALOGUE_VOICE},
            "audio_setting": {"format": "pcm"},
        }
        await ws.send(json.dumps(start))  # no model: the slot's default, Kokoro
        started = json.loads(await ws.recv())
        assert started["event"] == "task_started" and started["sample_rate"] == 24000, started
        turns = [await ws_turn(ws, text, voice) for voice, text in DIALOGUE]
    for (_, text), samples in zip(DIALOGUE, turns):
        assert word_error_rate(text, transcribe(client, samples, 24000)) <= 0.1
    gap = np.zeros(12000, np.float32)  # 0.5 s between turns
    spans, at = [], 0.0
    for samples in turns:
        spans.append((at, at + len(samples) / 24000))
        at += (len(samples) + len(gap)) / 24000
    talk = np.concatenate([np.concatenate([t, gap]) for t in turns])
    r = http.post("/v1/audio/diarization", files={"file": ("dialogue.wav", encode(talk, 24000, "wav"))}, timeout=600)
    assert r.status_code == 200, r.text
    host, george, emma, host_again = turn_speakers(r.json()["segments"], spans)
    assert len({host, george, emma}) == 3 and host_again == host, r.json()
