"""Kokoro-FastAPI's captioned speech (POST /dev/captioned_speech,
deployments/ingress/serving/captioned_speech.py): the audio with each word's timing, as one JSON
object or one JSON line per chunk, over a TTS slot scripted to time its words."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
import soundfile as sf

from deployments.protocol.errors import invalid_request
from deployments.protocol.speech import SpeechChunk, SpokenWord
from tests.assertions import assert_openai_error
from tests.ingress import fakes

RATE = fakes.SAMPLE_RATE
SENTENCES = [["Hello", "there"], ["How", "are", "you"]]  # one chunk each, 0.5 s


def timed_speech(params, model=None) -> list[SpeechChunk]:
    """Two chunks of 0.5 s; with `word_timings`, each names its words, evenly spread."""
    chunks = [SpeechChunk(sample_rate=RATE)]
    for i, words in enumerate(SENTENCES):
        t = np.arange(i * RATE // 2, (i + 1) * RATE // 2) / RATE
        samples = (0.2 * np.sin(2 * np.pi * 220 * t)).astype("<f4")
        step = 0.5 / len(words)
        timed = [
            SpokenWord(word=w, start=i * 0.5 + k * step, end=i * 0.5 + (k + 1) * step) for k, w in enumerate(words)
        ]
        chunks.append(
            SpeechChunk(sample_rate=RATE, samples=samples.tobytes(), words=timed if params.word_timings else [])
        )
    return chunks


@pytest.fixture
def tts(slots):
    slots["tts"].answers["synthesize"] = timed_speech
    return slots["tts"]


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def words_of(objects: list[dict]) -> list[str]:
    return [t["word"] for o in objects for t in o["timestamps"]]


async def test_one_json_object_with_the_file_and_every_word(http, tts):
    r = await http.post(
        "/dev/captioned_speech", json={"input": "Hello there. How are you?", "stream": False, "response_format": "wav"}
    )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["audio_format"] == "audio/wav" and words_of([body]) == ["Hello", "there", "How", "are", "you"]
    assert body["timestamps"][2] == {"word": "How", "start_time": 0.5, "end_time": pytest.approx(0.5 + 0.5 / 3)}
    samples, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])))
    assert rate == RATE and samples.size == RATE
    (params,) = tts.calls[-1][1]
    assert params.word_timings and params.text == "Hello there. How are you?"


async def test_streamed_lines_carry_each_chunks_bytes_and_words(http, tts):
    r = await http.post("/dev/captioned_speech", json={"input": "Hello there. How are you?", "response_format": "wav"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    objects = lines(r.text)
    assert [words_of([o]) for o in objects] == SENTENCES  # a line per chunk, with its words
    samples, _ = sf.read(io.BytesIO(b"".join(base64.b64decode(o["audio"]) for o in objects)))
    assert samples.size == RATE  # the lines' bytes join into one file


async def test_words_wait_for_the_bytes_of_a_format_encoded_whole(http, tts):
    r = await http.post("/dev/captioned_speech", json={"input": "Hello there. How are you?", "response_format": "flac"})
    (only,) = lines(r.text)
    assert words_of([only]) == ["Hello", "there", "How", "are", "you"] and only["audio_format"] == "audio/flac"
    assert sf.info(io.BytesIO(base64.b64decode(only["audio"]))).frames == RATE


async def test_without_timestamps_the_slot_is_not_asked_to_time_words(http, tts):
    r = await http.post("/dev/captioned_speech", json={"input": "Hi.", "stream": False, "return_timestamps": False})
    assert r.status_code == 200 and r.json()["timestamps"] == []
    assert not tts.calls[-1][1][0].word_timings


async def test_kokoro_fastapis_lang_code_is_the_language(http, tts):
    await http.post("/dev/captioned_speech", json={"input": "Hi.", "stream": False, "lang_code": "b"})
    assert tts.calls[-1][1][0].language == "b"


async def test_stream_format_is_refused_by_name(http, tts):
    r = await http.post("/dev/captioned_speech", json={"input": "Hi.", "stream_format": "sse"})
    assert_openai_error(r, 400, "stream_format")
    assert not tts.calls


async def test_a_model_that_cannot_time_words_is_a_400_before_any_byte(http, slots):
    def refuse(params, model=None):
        raise invalid_request("Model 'x' (pocket_tts) cannot time its words", "return_timestamps")

    slots["tts"].answers["synthesize"] = refuse
    r = await http.post("/dev/captioned_speech", json={"input": "Hi."})
    assert_openai_error(r, 400, "return_timestamps")
