"""The Realtime conversation on the live graph: espeak-ng speech appended as 24 kHz PCM16 with
server VAD is transcribed by the ASR slot (Whisper tiny.en), answered by the LLM slot
(SmolLM2) and spoken by the TTS slot (the tiny pocket_tts), as OpenAI's Realtime events over
a real `websockets` client; speech over the answer cancels it and stops both slots' work."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from typing import Annotated, Optional

import numpy as np
import soundfile as sf
from pydantic import Field  # the Agents SDK reads its tools' annotations from the module

from tests.assertions import wait_for
from tests.e2e.test_agent_api import _in_flight
from tests.speech import silence, speak, word_error_rate, words

RATE = 24000
SPOKEN = "Hello world, what is the weather like today?"


def appends(samples: np.ndarray, seconds: float = 0.1) -> list[dict]:
    data = np.clip(np.round(samples * 32768), -32768, 32767).astype("<i2").tobytes()
    step = int(RATE * seconds) * 2
    return [
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(data[i : i + step]).decode()}
        for i in range(0, len(data), step)
    ]


async def converse(server: str, messages: list[dict], timeout_s: float = 120) -> list[tuple[float, dict]]:
    """Send `messages` on /v1/realtime; every event (with its arrival time) up to response.done."""
    import websockets

    url = server.replace("http://", "ws://") + "/v1/realtime"
    events = []
    async with websockets.connect(url, max_size=None) as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created" and created["session"]["type"] == "realtime", created
        t0 = time.monotonic()
        for message in messages:
            await ws.send(json.dumps(message))
        while not events or events[-1][1]["type"] != "response.done":
            try:
                e = json.loads(await asyncio.wait_for(ws.recv(), timeout_s))
            except TimeoutError:
                raise AssertionError(
                    f"no event for {timeout_s} s after {[(t, e['type']) for t, e in events]}"
                ) from None
            assert e["type"] != "error", e
            events.append((round(time.monotonic() - t0, 2), e))
    return events


async def test_spoken_words_are_heard_answered_and_spoken_back(server):
    """Speech in, its turn ended by semantic_vad (the Agents SDK's default; the phone call below
    uses server_vad): 2.2 s of silence after it, enough for the longest pause of `high` should
    Whisper not punctuate the question as finished."""
    speech = np.concatenate([silence(0.4, RATE), speak(SPOKEN, RATE), silence(2.2, RATE)])
    turns = {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}
    update = {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": 24, "audio": turns}}
    timed = await converse(server, [update, *appends(speech)])
    events = [e for _, e in timed]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.updated" and "input_audio_buffer.speech_started" in kinds
    [heard] = [e["transcript"] for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    assert {"world", "weather", "today"} <= set(words(heard)), heard  # tiny.en may mishear "hello"
    assert kinds.index("conversation.item.input_audio_transcription.completed") < kinds.index("response.created")
    audio = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
    assert len(audio) % 2 == 0 and len(audio) / 2 / RATE > 0.2, len(audio)  # real speech came back, 24 kHz
    assert np.abs(np.frombuffer(audio, "<i2")).max() > 500  # not silence
    transcript = "".join(e["delta"] for e in events if e["type"] == "response.output_audio_transcript.delta")
    done = events[-1]["response"]
    assert done["status"] == "completed" and transcript.strip()
    assert done["output"][0]["content"][0]["transcript"] == transcript.strip()
    first_audio = next(t for t, e in timed if e["type"] == "response.output_audio.delta")
    stopped = next(t for t, e in timed if e["type"] == "input_audio_buffer.speech_stopped")
    print(
        f"realtime agent: heard {heard!r}, said {transcript!r}; first audio {first_audio - stopped:.2f} s after speech stopped"
    )


async def test_a_phone_call_in_mu_law_is_heard_and_answered_in_speech_the_asr_understands(server, http):
    """A telephone line's audio (G.711 μ-law at 8 kHz, what Twilio media streams carry) both
    ways: the question is transcribed, and the spoken answer, decoded from μ-law, is speech the
    ASR slot transcribes back to the words of the answer's transcript."""
    from deployments.audio.g711 import ulaw_decode, ulaw_encode

    phone = 8000
    speech = np.concatenate([silence(0.4, phone), speak(SPOKEN, phone), silence(1.0, phone)])
    line = ulaw_encode(np.clip(np.round(speech * 32767), -32768, 32767).astype("<i2"))
    g711 = {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}
    update = {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": 16, "audio": g711}}
    step = phone // 10  # 0.1 s a message
    chunks = [
        {"type": "input_audio_buffer.append", "audio": base64.b64encode(line[i : i + step]).decode()}
        for i in range(0, len(line), step)
    ]
    events = [e for _, e in await converse(server, [update, *chunks])]
    [heard] = [e["transcript"] for e in events if e["type"] == "conversation.item.input_audio_transcription.completed"]
    # Telephone-band speech, as Whisper tiny.en hears it ("what did the weather like to me")
    assert {"world", "weather"} <= set(words(heard)) and word_error_rate(SPOKEN, heard) <= 0.5, heard
    answer = ulaw_decode(
        b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "response.output_audio.delta")
    )
    said = events[-1]["response"]["output"][0]["content"][0]["transcript"]
    assert len(answer) / phone > 0.5, len(answer)
    buffer = io.BytesIO()
    sf.write(buffer, answer, phone, format="WAV", subtype="PCM_16")
    r = http.post(
        "/v1/audio/transcriptions", files={"file": ("answer.wav", buffer.getvalue())}, data={"model": "whisper-tiny.en"}
    )
    assert r.status_code == 200, r.text
    back, meant = set(words(r.json()["text"])), set(words(said))
    assert len(back & meant) >= 0.5 * len(meant), (said, r.json()["text"])  # the words come through the phone line
    print(f"phone call: heard {heard!r}, said {said!r}, the ASR heard the answer as {r.json()['text']!r}")


async def test_speech_over_the_answer_cancels_it_and_stops_both_slots(server, http):
    import websockets

    wait_for(lambda: _in_flight(http) == (0, 0), timeout_s=60)
    speech = np.concatenate([silence(0.4, RATE), speak(SPOKEN, RATE), silence(1.0, RATE)])
    update = {"type": "session.update", "session": {"type": "realtime", "max_output_tokens": 2000}}
    # The random-weight tiny LLM never says its end token: the answer is still running when the
    # user talks over it (SmolLM2 may finish first).
    url = server.replace("http://", "ws://") + "/v1/realtime?model=ominix-tiny-qwen3"
    seen = []

    async def until(ws, kind: str) -> dict:
        while True:
            e = json.loads(await asyncio.wait_for(ws.recv(), 120))
            seen.append(e["type"])
            assert e["type"] != "error", e
            if e["type"] == kind:
                return e

    async def attempt() -> Optional[dict]:
        """The interrupted response's response.done; None if the answer ended (the random model
        said its end token) before the interruption was heard."""
        seen.clear()
        async with websockets.connect(url, max_size=None) as ws:
            await until(ws, "session.created")
            for message in [update, *appends(speech)]:
                await ws.send(json.dumps(message))
            await until(ws, "response.output_audio.delta")  # the answer is playing
            for message in appends(speech):  # the user talks over it
                await ws.send(json.dumps(message))
            done = await until(ws, "response.done")
            interrupted = "input_audio_buffer.speech_started" in seen[seen.index("response.created") :]
            return done if interrupted or done["response"]["status"] != "completed" else None

    for _ in range(3):
        if (done := await attempt()) is not None:
            break
    assert done is not None, f"every answer ended before the user spoke over it: {seen}"
    assert done["response"]["status"] == "cancelled", seen
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    # The socket closed with the interrupting turn's answer maybe under way: nothing runs on.
    wait_for(lambda: _in_flight(http) == (0, 0), timeout_s=30, interval=0.3)


async def test_the_openai_sdk_holds_a_text_conversation(aclient):
    """The SDK's own Realtime client (`client.realtime.connect`), its typed events, two turns."""
    model = "ominix-smollm2-135m-instruct"
    async with aclient.realtime.connect(model=model) as conn:
        await conn.session.update(session={"type": "realtime", "output_modalities": ["text"], "max_output_tokens": 16})
        answers = []
        for question in ("What is the capital of France?", "And of Spain?"):
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
            await conn.conversation.item.create(item=item)
            await conn.response.create()
            deltas = []
            async for e in conn:
                assert e.type != "error", e
                if e.type == "response.output_text.delta":
                    deltas.append(e.delta)
                if e.type == "response.done":
                    break
            assert e.response.status == "completed" and e.response.output[0].content[0].text == "".join(deltas)
            assert e.response.usage.input_tokens > 5 and 0 < e.response.usage.output_tokens <= 16
            answers.append("".join(deltas))
    assert all(a.strip() for a in answers), answers


async def test_the_openai_sdk_runs_a_function_call_round_trip(aclient):
    """A voice agent's tool use as the SDK sends it: a function tool in the session, a call the
    model makes (forced for this response: SmolLM2-135M does not choose tools reliably), its
    output added back, and the answer written with it in the model's context."""
    import jsonschema

    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},  # at temperature 1, a bounded call
            "required": ["city"],
            "additionalProperties": False,
        },
    }

    async def until_done(conn) -> list:
        events = []
        async for e in conn:
            assert e.type != "error", e
            events.append(e)
            if e.type == "response.done":
                return events

    async with aclient.realtime.connect(model="ominix-smollm2-135m-instruct") as conn:
        await conn.session.update(session={"type": "realtime", "tools": [tool], "max_output_tokens": 48})
        question = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}
        await conn.conversation.item.create(item=question)
        await conn.response.create(response={"tool_choice": {"type": "function", "name": "get_weather"}})
        events = await until_done(conn)
        [call] = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert call.name == "get_weather"
        jsonschema.validate(json.loads(call.arguments), tool["parameters"])
        assert events[-1].response.output[-1].type == "function_call"
        output = {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny", "celsius": 21}'}
        await conn.conversation.item.create(item=output)
        # The answer as text: the Agents SDK test below hears one spoken after a call.
        await conn.response.create(response={"tool_choice": "none", "output_modalities": ["text"]})
        answer = await until_done(conn)
        done = answer[-1].response
        assert done.status == "completed" and [i.type for i in done.output] == ["message"]
        assert done.output[0].content[0].text.strip() and done.usage.input_tokens > 0


async def test_an_agents_sdk_realtime_agent_calls_its_tool_and_speaks_the_answer(server):
    """The OpenAI Agents SDK's RealtimeAgent and RealtimeRunner, as a voice-agent app runs
    them, pointed at the graph: the SDK configures the session with its own defaults (OpenAI's
    model names, semantic_vad), sends a typed question, runs its own function tool on the call the model
    makes and sends the result back, and plays the spoken answer. The first call is forced
    (`tool_choice` required: SmolLM2-135M does not choose tools reliably); the tool hands the
    choice back to the model, as an app that must have one lookup first does."""
    from agents import function_tool
    from agents.realtime import RealtimeAgent, RealtimeRunner
    from agents.realtime.model_inputs import RealtimeModelSendSessionUpdate

    # The SDK's own defaults for the rest: gpt-realtime-2.1 (the session's pipeline here, the
    # LLM slot's default answering), gpt-4o-mini-transcribe (an alias of the ASR default) and
    # semantic_vad.
    settings = {"voice": "alloy", "tool_choice": "required", "max_output_tokens": 48}
    asked: list[str] = []
    live = {}  # the session, once the runner has opened it

    @function_tool
    async def get_weather(city: Annotated[str, Field(max_length=24)]) -> str:  # a bounded call at temperature 1
        """The weather in a city."""
        asked.append(city)
        update = RealtimeModelSendSessionUpdate(session_settings={**settings, "tool_choice": "none"})
        await live["session"].model.send_event(update)
        return "Sunny and 21 degrees."

    agent = RealtimeAgent(name="Weather", instructions="Answer in one sentence.", tools=[get_weather])
    runner = RealtimeRunner(agent, config={"model_settings": settings})
    url = server.replace("http://", "ws://") + "/v1/realtime"
    seen, audio = [], 0
    async with await runner.run(model_config={"url": url, "headers": {}}) as session:
        live["session"] = session
        await session.send_message("What is the weather in Paris?")

        async def events() -> None:
            nonlocal audio
            async for event in session:
                seen.append(event.type if event.type != "raw_model_event" else f"raw:{event.data.type}")
                assert event.type != "error", event
                audio += len(event.audio.data) if event.type == "audio" else 0
                if event.type == "agent_end" and "tool_end" in seen and audio:  # the spoken answer's turn
                    return

        try:
            await asyncio.wait_for(events(), 180)
        except TimeoutError:
            raise AssertionError(f"no answer after 180 s: {seen}") from None
    assert len(asked) == 1 and asked[0].strip(), seen  # the SDK ran its tool once, with a city
    assert seen.index("tool_start") < seen.index("tool_end") < len(seen) - 1
    assert audio > 24000 * 2 * 0.5, seen  # at least half a second of the spoken answer reached the app
