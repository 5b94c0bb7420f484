"""POST /v1/audio/transcriptions through the real graph: the openai SDK, raw httpx bodies,
the OminiX-API JSON form, containers, errors, real speech with real Whisper tiny.en, a long
recording's timestamps, and batching under concurrency next to a chat stream."""

from __future__ import annotations

import asyncio
import base64
import time

import numpy as np
import openai
import pytest

from tests.assertions import assert_openai_error
from tests.speech import encode, long_recording, silence, speak, word_error_rate, words

REAL = "whisper-tiny.en"  # the shipped default ASR model
TINY = "ominix-tiny-whisper"  # random weights: code paths only
RATE = 16000
SENTENCE = "The quick brown fox jumps over the lazy dog. Please schedule the meeting for Tuesday afternoon."


@pytest.fixture(scope="module")
def hello_wav():
    return encode(speak("Hello world, this is a test."), RATE, "wav")


def test_real_speech_with_the_default_model(client):
    """Real Whisper tiny.en, served by default, hears espeak-ng's speech (word error rate bound)."""
    audio = np.concatenate([silence(0.5), speak(SENTENCE), silence(0.5)])
    result = client.audio.transcriptions.create(
        model=REAL,
        file=("speech.wav", encode(audio, RATE, "wav")),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    wer = word_error_rate(SENTENCE, result.text)
    print(f"real speech: WER {wer:.3f}: {result.text!r}")
    assert wer <= 0.3, result.text
    assert result.language == "en" and result.duration == pytest.approx(len(audio) / RATE, abs=0.01)
    assert result.segments and result.segments[0].start >= 0 and result.segments[-1].end <= result.duration + 0.01
    spoken = [w.word.strip(" .,").lower() for w in result.words]
    assert "tuesday" in spoken and "schedule" in spoken
    starts = [w.start for w in result.words]
    assert starts == sorted(starts) and 0.3 <= starts[0] and result.words[-1].end <= result.duration + 0.01
    # "Tuesday" comes late in the sentence, "schedule" before it
    assert result.words[spoken.index("schedule")].start < result.words[spoken.index("tuesday")].start


def test_token_logprobs_through_the_sdk(client):
    """include=["logprobs"] as the openai SDK sends it: each token of the text, with its
    log-probability; Whisper is confident of clear speech."""
    result = client.audio.transcriptions.create(
        model=REAL, file=("speech.wav", encode(speak(SENTENCE), RATE, "wav")), include=["logprobs"]
    )
    assert "".join(entry.token for entry in result.logprobs).strip() == result.text
    assert all(entry.logprob <= 0 and entry.bytes for entry in result.logprobs)
    assert np.mean([np.exp(entry.logprob) for entry in result.logprobs]) > 0.5


def test_model_is_listed(client):
    ids = {m.id for m in client.models.list().data}
    assert {REAL, TINY} <= ids


@pytest.mark.parametrize("fmt", ["json", "text", "verbose_json", "srt", "vtt"])
def test_each_response_format_through_the_sdk(client, http, hello_wav, fmt):
    result = client.audio.transcriptions.create(model=TINY, file=("a.wav", hello_wav), response_format=fmt)
    raw = http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", hello_wav)}, data={"model": TINY, "response_format": fmt}
    )
    assert raw.status_code == 200, raw.text
    expected_type = {
        "json": "application/json",
        "verbose_json": "application/json",
        "text": "text/plain",
        "srt": "application/x-subrip",
        "vtt": "text/vtt",
    }[fmt]
    assert raw.headers["content-type"].startswith(expected_type)
    if fmt == "json":
        assert isinstance(result.text, str) and result.text == raw.json()["text"]
    elif fmt == "verbose_json":
        assert result.text == raw.json()["text"] and result.duration == pytest.approx(1.9, abs=1.0)
        assert all(0 <= s.start <= s.end <= result.duration + 0.01 for s in result.segments)
    elif fmt == "text":
        assert isinstance(result, str) and result == raw.text
    elif fmt == "srt":
        assert result.startswith("1\n00:00:0") and " --> " in result
    else:
        assert result.startswith("WEBVTT\n\n00:00:0") and " --> " in result


@pytest.mark.parametrize("fmt", ["mp3", "flac", "m4a", "ogg", "webm"])
def test_containers(client, fmt):
    data = encode(speak("One two three."), 24000, fmt)
    result = client.audio.transcriptions.create(model=TINY, file=(f"a.{fmt}", data), response_format="verbose_json")
    assert result.duration == pytest.approx(1.2, abs=0.8)


def test_raw_body_with_query_parameters(http, hello_wav):
    """MiniInfer's form: the audio is the body, parameters in the query string."""
    mp3 = encode(speak("Hello world."), RATE, "mp3")
    r = http.post(
        "/v1/audio/transcriptions",
        params={"model": TINY, "response_format": "verbose_json"},
        content=mp3,
        headers={"content-type": "audio/mpeg"},
    )
    assert r.status_code == 200, r.text
    assert set(r.json()) >= {"text", "language", "duration", "segments"}
    r = http.post(
        "/v1/audio/transcriptions?model=" + TINY + "&response_format=text",
        content=hello_wav,
        headers={"content-type": "application/octet-stream"},
    )
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")


def test_ominix_json_base64_form(http):
    flac = encode(speak("Hello world."), RATE, "flac")
    r = http.post(
        "/v1/audio/transcriptions", json={"file": base64.b64encode(flac).decode(), "model": TINY, "language": "en"}
    )
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["text"], str)
    # the same audio as multipart gives the same transcript
    same = http.post("/v1/audio/transcriptions", files={"file": ("a.flac", flac)}, data={"model": TINY})
    assert same.json()["text"] == r.json()["text"]


@pytest.mark.parametrize(
    "kwargs, status, param",
    [
        ({"files": {"file": ("a.wav", b"")}}, 400, "file"),
        ({"files": {"file": ("a.wav", b"RIFF not really a wave file" * 20)}}, 400, "file"),
        ({"data": {"model": TINY}}, 400, "file"),
        ({"files": {"file": ("a.wav", "WAV")}, "data": {"model": "nope"}}, 404, "model"),
        ({"files": {"file": ("a.wav", "WAV")}, "data": {"response_format": "xml"}}, 400, "response_format"),
        ({"files": {"file": ("a.wav", "WAV")}, "data": {"temperature": "5"}}, 400, "temperature"),
        ({"files": {"file": ("a.wav", "WAV")}, "data": {"model": TINY, "language": "fr"}}, 400, "language"),
        ({"json": {"file": "%%% not base64", "model": TINY}}, 400, "file"),
        ({"json": {"file": "/etc/passwd", "model": TINY}}, 400, "file"),
        ({"json": {"model": TINY}}, 400, "file"),
        ({"content": b"", "headers": {"content-type": "audio/wav"}}, 400, "file"),
    ],
)
def test_errors_are_openai_shaped_4xx(http, hello_wav, kwargs, status, param):
    if "files" in kwargs and kwargs["files"]["file"][1] == "WAV":
        kwargs = {**kwargs, "files": {"file": ("a.wav", hello_wav)}}
    r = http.post("/v1/audio/transcriptions", **kwargs)
    error = assert_openai_error(r, status, param)
    if param == "file" and "json" not in kwargs:
        assert "audio" in error["message"].lower() or "file" in error["message"].lower()


def test_undecodable_audio_message_and_replica_survives(client, http, hello_wav):
    with pytest.raises(openai.BadRequestError) as info:
        client.audio.transcriptions.create(model=TINY, file=("a.m4a", b"\x00\x00\x00\x18ftypM4A garbage" * 50))
    assert "could not be decoded" in info.value.message
    assert (
        http.post("/v1/audio/transcriptions", files={"file": ("a.wav", hello_wav)}, data={"model": TINY}).status_code
        == 200
    )


async def test_16_concurrent_requests_batch_and_match_while_a_chat_streams(aclient, server):
    """Batched answers equal one-at-a-time answers (mixed lengths), and ASR does not block chat."""
    from ray import serve

    inputs = [
        encode(speak("Hi."), RATE, "wav"),
        encode(
            np.concatenate(
                [speak("A somewhat longer sentence with more words."), silence(1.0), speak("Then a pause, and more.")]
            ),
            RATE,
            "wav",
        ),
        encode(speak("Numbers one two three four."), RATE, "wav"),
        encode(speak("The end."), RATE, "wav"),
    ]

    async def transcribe(data: bytes) -> str:
        return (await aclient.audio.transcriptions.create(model=TINY, file=("a.wav", data))).text

    reference = [await transcribe(d) for d in inputs]  # one at a time: batches of one
    asr = serve.get_deployment_handle("ASR", app_name="ominix")
    before = await asr.stats.remote()

    chat_done_at = []

    async def chat_stream():
        stream = await aclient.chat.completions.create(
            model="ominix-tiny-qwen3", messages=[{"role": "user", "content": "hello"}], max_tokens=64, stream=True
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        chat_done_at.append(time.monotonic())
        return "".join(parts)

    started = time.monotonic()
    chat_task = asyncio.create_task(chat_stream())
    results = await asyncio.gather(*(transcribe(inputs[i % 4]) for i in range(16)))
    asr_done_at = time.monotonic()
    chat_text = await chat_task
    assert results == [reference[i % 4] for i in range(16)]
    assert chat_text and chat_done_at[0] < asr_done_at, "the chat stream waited for ASR"
    after = await asr.stats.remote()
    new_batches = {int(k): v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()}
    assert max(size for size, n in new_batches.items() if n > 0) > 1, new_batches
    assert after["engines"][TINY]["largest_pass"] > 1
    print(f"16 requests in {asr_done_at - started:.1f}s; batches: {new_batches}")


@pytest.mark.slow
def test_five_minute_recording_keeps_every_sentence_at_the_right_time(http):
    """5 minutes of speech with pauses, real model: VAD windows <= 30 s, segment times map to
    the input's time line, no sentence dropped or repeated (a word error rate bound)."""
    audio, spans = long_recording(300.0)
    started = time.monotonic()
    r = http.post(
        "/v1/audio/transcriptions",
        files={"file": ("long.flac", encode(audio, RATE, "flac"))},
        data={"model": REAL, "response_format": "verbose_json"},
        timeout=900,
    )
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    body = r.json()
    reference = " ".join(text for text, _, _ in spans)
    wer = word_error_rate(reference, body["text"])
    print(
        f"{len(audio) / RATE:.0f}s of audio transcribed in {elapsed:.0f}s, WER {wer:.3f}, "
        f"{len(body['segments'])} segments"
    )
    assert wer <= 0.35
    segments = body["segments"]
    assert [s["start"] for s in segments] == sorted(s["start"] for s in segments)
    assert segments[-1]["end"] <= body["duration"] + 0.01
    found = 0
    for text, start, end in spans:
        overlapping = " ".join(s["text"] for s in segments if s["start"] < end + 1.0 and s["end"] > start - 1.0)
        expected = set(words(text))
        found += len(expected & set(words(overlapping))) / len(expected) >= 0.5
    assert found >= 0.9 * len(spans), f"{found}/{len(spans)} sentences found at their time"


async def test_concurrent_requests_with_different_options_get_their_own_answers(aclient):
    """Mixed prompts and granularities arriving together: each answer is what it is alone."""
    data = encode(speak("Good morning everyone."), RATE, "wav")
    variants = [{}, {"prompt": "Ominix meeting notes."}, {"timestamp_granularities": ["word"]}]

    async def transcribe(extra: dict):
        r = await aclient.audio.transcriptions.create(
            model=TINY, file=("a.wav", data), response_format="verbose_json", **extra
        )
        return r.text, bool(getattr(r, "words", None))

    alone = [await transcribe(v) for v in variants]
    together = await asyncio.gather(*(transcribe(variants[i % 3]) for i in range(9)))
    assert together == [alone[i % 3] for i in range(9)]
    assert [has_words for _, has_words in alone] == [False, False, True]
