"""Streaming transcription through the real graph with the real Whisper tiny.en: MiniInfer's
sessions fed espeak-ng speech with a pause in 0.5 s chunks (partials, two utterances, text equal
to whole-file transcription of the same utterances), every error case on the live routes, and
8 sessions at once next to a chat stream."""

from __future__ import annotations

import asyncio
import io
import json
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.assertions import assert_openai_error
from tests.speech import silence, speak, word_error_rate, words

REAL = "whisper-tiny.en"
RATE = 16000
FIRST = "Hello world, this is the first sentence, and it goes on for a few more words."
SECOND = "Please schedule the meeting for Tuesday afternoon."
SESSIONS = "/v1/audio/stream/sessions"
CHUNK = RATE // 2 * 2  # 0.5 s of PCM16, in bytes


def pcm16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2")


@pytest.fixture(scope="module")
def speech_pcm() -> np.ndarray:
    """Two sentences with a 1.2 s pause between them, as PCM16 samples."""
    audio = np.concatenate([silence(0.4), speak(FIRST), silence(1.2), speak(SECOND), silence(1.0)])
    return pcm16(audio)


def wav(samples: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, RATE, format="WAV", subtype="PCM_16")  # int16 in, exact
    return buf.getvalue()


def stream(http, pcm: np.ndarray, model: str = REAL) -> tuple[list[dict], dict]:
    """Feed `pcm` in 0.5 s chunks at the pace a microphone would (partials are decoded in the
    background and show in the answers of later chunks), then finish."""
    r = http.post(SESSIONS, params={"model": model})
    assert r.status_code == 200, r.text
    sid = r.json()["sid"]
    data = pcm.tobytes()
    answers = []
    started = time.monotonic()
    for n, i in enumerate(range(0, len(data), CHUNK)):
        time.sleep(max(0.0, started + n * 0.5 - time.monotonic()))
        r = http.post(f"{SESSIONS}/{sid}", content=data[i : i + CHUNK])
        assert r.status_code == 200, r.text
        answers.append(r.json())
    r = http.post(f"{SESSIONS}/{sid}", params={"finish": 1})
    assert r.status_code == 200, r.text
    return answers, r.json()


def test_a_session_finalises_what_whole_file_transcription_says(http, speech_pcm):
    answers, final = stream(http, speech_pcm)
    partials = [a["partial"] for a in answers if a["partial"]]
    print("partials:", partials)
    print("final:", json.dumps(final))
    assert partials, "no partial hypothesis while speaking"
    # A partial is a real hypothesis of the words being said (the fast, shortened-context path).
    spoken = set(words(f"{FIRST} {SECOND}"))
    assert max(len(set(words(p)) & spoken) for p in partials) >= 3, partials
    # The pause finalised the first sentence before the stream ended.
    first_final = next(i for i, a in enumerate(answers) if a["utterance_final"])
    assert first_final < len(answers) - 2 and answers[first_final]["text"]
    assert final["final"] and final["partial"] == "" and len(final["segments"]) == 2
    assert word_error_rate(f"{FIRST} {SECOND}", final["text"]) <= 0.3, final["text"]
    # Each finalised utterance, sent as a file, reads exactly the same (temperature 0).
    whole = []
    for seg in final["segments"]:
        piece = speech_pcm[round(seg["start"] * RATE) : round(seg["end"] * RATE)]
        r = http.post(
            "/v1/audio/transcriptions",
            files={"file": ("u.wav", wav(piece))},
            data={"model": REAL, "temperature": "0"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["text"] == seg["text"]
        whole.append(r.json()["text"])
    assert final["text"] == " ".join(whole)
    # The session is gone.
    assert_openai_error(http.post(f"{SESSIONS}/{final['sid']}", content=b"\x00\x00"), 404, code="session_not_found")


def test_sessions_are_listed_and_deleted(http):
    sid = http.post(SESSIONS).json()["sid"]
    assert http.post(f"{SESSIONS}/{sid}", content=b"\x00\x00" * 1600).status_code == 200
    listed = http.get(SESSIONS).json()
    mine = [s for s in listed["sessions"] if s["sid"] == sid]
    assert listed["live"] >= 1 and mine and mine[0]["received_s"] == 0.1
    assert http.get(f"{SESSIONS}/{sid}").json()["received_s"] == 0.1
    assert http.delete(f"{SESSIONS}/{sid}").json() == {"sid": sid, "deleted": True}
    assert_openai_error(http.delete(f"{SESSIONS}/{sid}"), 404, code="session_not_found")
    assert sid not in {s["sid"] for s in http.get(SESSIONS).json()["sessions"]}


def test_bad_chunks_and_unknown_sessions(http):
    sid = http.post(SESSIONS).json()["sid"]
    assert_openai_error(http.post(f"{SESSIONS}/{sid}", content=b"\x00\x01\x02"), 400, code="invalid_pcm")
    assert_openai_error(http.post(f"{SESSIONS}/{sid}", content=b""), 400, code="invalid_pcm")
    big = b"\x00" * (31 * RATE * 2)  # over stream_max_chunk_s (30 s), under the route's body cap
    assert_openai_error(http.post(f"{SESSIONS}/{sid}", content=big), 400, code="chunk_too_large")
    assert http.post(f"{SESSIONS}/{sid}", content=b"\x00\x00").status_code == 200  # still alive
    assert_openai_error(http.post(f"{SESSIONS}/nonsense", content=b"\x00\x00"), 404, code="session_not_found")
    assert_openai_error(http.post(SESSIONS, params={"model": "no-such-model"}), 404, code="model_not_found")
    assert_openai_error(http.post(SESSIONS, params={"diarize": "maybe"}), 400, param="diarize")
    http.delete(f"{SESSIONS}/{sid}")


async def test_eight_sessions_at_once_next_to_a_chat_stream(server, speech_pcm):
    short = speech_pcm[: int(2.5 * RATE)]

    async def session(client: httpx.AsyncClient) -> dict:
        sid = (await client.post(SESSIONS)).json()["sid"]
        data = short.tobytes()
        for i in range(0, len(data), CHUNK):
            r = await client.post(f"{SESSIONS}/{sid}", content=data[i : i + CHUNK])
            assert r.status_code == 200, r.text
        r = await client.post(f"{SESSIONS}/{sid}", params={"finish": 1})
        assert r.status_code == 200, r.text
        return r.json()

    async def chat(client: httpx.AsyncClient) -> str:
        body = {"messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 16, "stream": True}
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            return "".join([line async for line in r.aiter_lines()])

    async with httpx.AsyncClient(base_url=server, timeout=300) as client:
        results = await asyncio.gather(*(session(client) for _ in range(8)), chat(client))
    finals = results[:8]
    assert "[DONE]" in results[8]
    texts = {f["text"] for f in finals}
    assert len(texts) == 1 and "hello" in texts.pop().lower()  # the same audio, the same text


def test_the_sdk_streams_a_transcription(client, speech_pcm):
    audio = wav(speech_pcm)
    whole = client.audio.transcriptions.create(model=REAL, file=("s.wav", audio), temperature=0)
    events = list(client.audio.transcriptions.create(model=REAL, file=("s.wav", audio), temperature=0, stream=True))
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    done = events[-1]
    assert deltas and done.type == "transcript.text.done" and len(events) == len(deltas) + 1
    assert "".join(d.delta for d in deltas) == done.text == whole.text
    assert done.usage.type == "duration" and done.usage.seconds == pytest.approx(len(speech_pcm) / RATE, abs=0.01)
    # include=["logprobs"]: each delta carries its tokens', the done event all of them
    events = list(
        client.audio.transcriptions.create(
            model=REAL, file=("s.wav", audio), temperature=0, stream=True, include=["logprobs"]
        )
    )
    deltas, done = events[:-1], events[-1]
    assert [t.token for d in deltas for t in d.logprobs] == [t.token for t in done.logprobs]
    assert "".join(t.token for t in done.logprobs).strip() == done.text == whole.text


def test_translation_needs_a_multilingual_model(client, speech_pcm):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.audio.translations.create(model=REAL, file=("s.wav", wav(speech_pcm)))
    assert "English-only" in str(info.value)


async def realtime_events(server, messages: list[dict], completions: int) -> list[dict]:
    """Send `messages` on /v1/realtime?intent=transcription; the events up to the n-th completed."""
    import websockets

    url = server.replace("http://", "ws://") + "/v1/realtime?intent=transcription"
    events = []
    async with websockets.connect(url, max_size=None) as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        for message in messages:
            await ws.send(json.dumps(message))
        done = 0
        while done < completions:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            assert events[-1]["type"] != "error", events[-1]
            done += events[-1]["type"] == "conversation.item.input_audio_transcription.completed"
    return events


def appends(pcm: np.ndarray, rate: int, seconds: float = 0.1) -> list[dict]:
    import base64

    step = int(rate * seconds) * 2
    data = pcm.tobytes()
    return [
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + step]).decode()}
        for i in range(0, len(data), step)
    ]


async def test_realtime_server_vad_transcribes_each_utterance(server, speech_pcm):
    from deployments.audio.resample import resample

    at_24k = pcm16(resample(speech_pcm.astype(np.float32) / 32768, RATE, 24000))
    events = await realtime_events(server, appends(at_24k, 24000), completions=2)
    kinds = [e["type"] for e in events]
    assert kinds.count("input_audio_buffer.speech_started") >= 2 and "input_audio_buffer.speech_stopped" in kinds
    transcripts = [e["transcript"] for e in events if e["type"].endswith("transcription.completed")]
    print("realtime:", transcripts)
    assert word_error_rate(FIRST, transcripts[0]) <= 0.3 and word_error_rate(SECOND, transcripts[1]) <= 0.3


async def test_realtime_manual_commit(server, speech_pcm):
    """Manual commits, the transcription's token log-probabilities included."""
    update = {
        "type": "session.update",
        "session": {
            "type": "transcription",
            "include": ["item.input_audio_transcription.logprobs"],
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}},
        },
    }
    first = speech_pcm[: int(6.0 * RATE)]  # FIRST (it ends near 5.3 s) and part of the pause
    messages = [update, *appends(first, RATE), {"type": "input_audio_buffer.commit"}]
    events = await realtime_events(server, messages, completions=1)
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.updated" and "input_audio_buffer.speech_started" not in kinds
    assert kinds[-3:] == [
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
    ]
    assert word_error_rate(FIRST, events[-1]["transcript"]) <= 0.3, events[-1]
    logprobs = events[-1]["logprobs"]
    assert "".join(t["token"] for t in logprobs).strip() == events[-1]["transcript"]
    assert all(t["logprob"] <= 0 for t in logprobs) and events[-2]["logprobs"] == logprobs
