"""The audio/WebSocket corpus's slot-checked cases (tests/corpus/bad_audio.py) on the live graph:
each gets its 4xx from the slot (decoding, voices, model limits), and afterwards every slot
answers a normal request and no replica was replaced (a replica that crashed would be). The
ingress's own refusals are tested in process (tests/ingress/test_bad_input_audio.py).
"""

from __future__ import annotations

import io
import json

import pytest
import soundfile as sf
import websockets

from deployments.tts.tiny_model import TINY_TTS_ID
from tests.assertions import assert_openai_error, ws_tts_audio
from tests.corpus.bad_audio import (
    ASR,
    HTTP_CASES,
    SLOT_CHECKED,
    TEXT,
    TINY_ASR,
    TTS,
    VOICES,
    WAV,
    WS_CASES,
    WS_SLOT_CHECKED,
    request_of,
    ws_frame,
)

SLOT_CASES = [case for case in HTTP_CASES if case.id in SLOT_CHECKED]
WS_MAX_FRAME = 16 * 1024 * 1024  # uvicorn's ws_max_size, which Serve's proxy uses


def _replicas() -> dict[str, set[str]]:
    import ray

    out: dict[str, set[str]] = {}
    for actor in ray.util.list_named_actors(all_namespaces=True):
        parts = actor["name"].split("#")
        if actor["name"].startswith("SERVE_REPLICA::ominix#") and len(parts) == 3:
            out.setdefault(parts[1], set()).add(parts[2])
    return out


@pytest.fixture(scope="module")
def replicas_before(server):
    return _replicas()


@pytest.fixture
def ws_url(server):
    return server.replace("http://", "ws://") + "/ws/v1/tts"


@pytest.mark.parametrize("path, method, request_kwargs, status, param", SLOT_CASES)
def test_bad_audio_request_gets_its_4xx_from_the_slot(
    http, replicas_before, path, method, request_kwargs, status, param
):
    assert_openai_error(http.request(method, path, **request_of(request_kwargs)), status, param)


@pytest.mark.parametrize("index", sorted(WS_SLOT_CHECKED))
async def test_bad_websocket_frame_gets_the_slots_error_event_and_the_session_goes_on(ws_url, replicas_before, index):
    frame, expected = WS_CASES[index]
    async with websockets.connect(ws_url, max_size=None) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        await ws.send(ws_frame(frame))
        error = json.loads(await ws.recv())
        assert error["event"] == "error" and error["message"].startswith(expected), error
        await ws.send(json.dumps({"event": "task_start", "model": TINY_TTS_ID, "voice_setting": {"voice_id": "alba"}}))
        assert json.loads(await ws.recv())["event"] == "task_started"


async def test_task_continue_before_task_start_uses_the_defaults(ws_url, replicas_before):
    """Documented: task_start is optional (OminiX-API); not an error. The defaults: Kokoro, af_heart."""
    async with websockets.connect(ws_url) as ws:
        await ws.recv()
        await ws.send(json.dumps({"event": "task_continue", "text": "Short and sweet, said the voice."}))
        frames = [json.loads(await ws.recv())]
        while not frames[-1].get("is_final"):
            frames.append(json.loads(await ws.recv()))
        assert all(f["event"] == "task_progress" for f in frames) and len(frames) > 1


async def test_frame_over_the_size_limit_closes_with_1009(ws_url, replicas_before):
    async with websockets.connect(ws_url, max_size=None) as ws:
        await ws.recv()
        await ws.send("x" * (WS_MAX_FRAME + 1))
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
    assert ws.close_code == 1009  # "message too big": the proxy refuses it before the ingress sees it


def test_empty_input_is_an_empty_wav_as_in_ominix_api(http, replicas_before):
    """Documented (OminiX-API): empty input gives a valid WAV with no samples, not an error."""
    r = http.post(TTS, json={"input": ""})
    assert r.status_code == 200
    samples, _ = sf.read(io.BytesIO(r.content))
    assert samples.size == 0


def test_every_slot_answers_and_no_replica_was_replaced(client, http, replicas_before):
    from ray import serve

    r = http.post(ASR, files={"file": ("a.wav", WAV)}, data={"model": TINY_ASR})
    assert r.status_code == 200 and isinstance(r.json()["text"], str)
    speech = http.post(TTS, json={"model": TINY_TTS_ID, "input": TEXT, "voice": "alba", "response_format": "wav"})
    samples, rate = sf.read(io.BytesIO(speech.content))
    assert speech.status_code == 200 and rate == 24000 and samples.size > 0
    assert http.get(VOICES).status_code == 200
    chat = client.chat.completions.create(
        model="ominix-tiny-qwen3", messages=[{"role": "user", "content": "hi"}], max_tokens=2, temperature=0
    )
    assert chat.choices[0].finish_reason == "length"

    app = serve.status().applications["ominix"]
    assert app.status == "RUNNING"
    for name, deployment in app.deployments.items():
        assert deployment.status == "HEALTHY", name
        assert set(deployment.replica_states) == {"RUNNING"}, (name, deployment.replica_states)
    after = _replicas()
    for deployment, ids in after.items():  # a crashed replica would have been replaced by a new id
        assert ids <= replicas_before.get(deployment, set()), (deployment, replicas_before, after)


async def test_websocket_still_synthesizes_after_the_corpus(ws_url, replicas_before):
    async with websockets.connect(ws_url) as ws:
        await ws.recv()
        await ws.send(json.dumps({"event": "task_continue", "text": TEXT}))
        audio = await ws_tts_audio(ws)
        assert len(audio) > 0 and len(audio) % 2 == 0
