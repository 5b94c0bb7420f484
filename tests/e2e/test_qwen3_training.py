"""End to end: voice training on a Qwen3-TTS Base model, in a small app of its own on the session
graph whose TTS default is the tiny random Qwen3-TTS Base (tests/tiny_qwen3_tts.py: no
real Qwen3-TTS weights can be had here). The job computes the x-vector and the clip's codes once
(`voice_conditioning`), registers the voice, and the voice is then spoken by name over HTTP and
the WebSocket exactly as cloning from the clip with its transcript."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
import websockets

from deployments.audio.encode import encode_wav
from tests.assertions import only_slots, wait_for

pytestmark = pytest.mark.slow

APP = "qwen3-train"
TRANSCRIPT = "A low tone."
TEXT = {"input": "Hello there.", "response_format": "pcm"}


@pytest.fixture(scope="module")
def qwen3(server, cache_dir, tmp_path_factory):
    from ray import serve

    from graphs.config import GraphArgs
    from graphs.omni import build_graph
    from tests.tiny_qwen3_tts import ensure_tiny_qwen3_tts

    work = tmp_path_factory.mktemp("qwen3-train")
    tts = {"default_model": str(ensure_tiny_qwen3_tts(cache_dir)), "voices_config": str(work / "voices.json")}
    args = {"cache_dir": str(cache_dir), **only_slots("tts"), "tts": tts}
    app = build_graph(GraphArgs.from_args(args, environ={}), options={"TTS": {"num_replicas": 1}})
    serve.run(app, name=APP, route_prefix=f"/{APP}", blocking=False)
    client = httpx.Client(base_url=f"{server}/{APP}", timeout=120)
    wait_for(lambda: client.get("/readyz").status_code == 200, 180)
    client.work = work
    yield client
    client.close()
    serve.delete(APP)


@pytest.fixture(scope="module")
def clip() -> bytes:
    t = np.arange(2 * 24000) / 24000  # a cosine: loud at both ends, so trimming keeps it whole
    return encode_wav((0.4 * np.cos(2 * np.pi * 260 * t)).astype(np.float32), 24000)


@pytest.fixture(scope="module")
def trained(qwen3, clip) -> list[dict]:
    body = {"voice_name": "qwen3voice", "audio": base64.b64encode(clip).decode(), "transcript": TRANSCRIPT}
    r = qwen3.post("/v1/voices/train", json=body)
    assert r.status_code == 200, r.text
    with qwen3.stream("GET", "/v1/voices/train/progress", params={"task_id": r.json()["task_id"]}) as events:
        return [json.loads(line[6:]) for line in events.iter_lines() if line.startswith("data: ")]


def test_the_job_computes_the_conditioning_once_and_registers_the_voice(qwen3, trained):
    stages = [event["stage"] for event in trained]
    assert stages[-1] == "complete" and "voice_conditioning" in stages and "failed" not in stages, stages
    entry = json.loads((qwen3.work / "voices.json").read_text())["voices"]["qwen3voice"]
    assert entry["conditioning"].endswith(".qwen3_tts.safetensors") and entry["ref_text"] == TRANSCRIPT
    assert "qwen3voice" in [v["name"] for v in qwen3.get("/v1/voices").json()["voices"]]


def test_the_voice_speaks_by_name_as_cloning_from_the_clip(qwen3, trained, clip):
    cloned = qwen3.post(
        "/v1/audio/speech",
        json={**TEXT, "reference_audio": base64.b64encode(clip).decode(), "reference_text": TRANSCRIPT},
    )
    spoken = qwen3.post("/v1/audio/speech", json={**TEXT, "voice": "qwen3voice"})
    assert cloned.status_code == spoken.status_code == 200, (cloned.text, spoken.text)
    assert len(spoken.content) > 0 and spoken.content == cloned.content
    # and not what the model says without the voice
    assert qwen3.post("/v1/audio/speech", json=TEXT).content != spoken.content


async def test_the_websocket_speaks_the_voice(server, trained):
    async with websockets.connect(server.replace("http://", "ws://") + f"/{APP}/ws/v1/tts") as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        start = {"event": "task_start", "voice_setting": {"voice_id": "qwen3voice"}, "audio_setting": {"format": "pcm"}}
        await ws.send(json.dumps(start))
        assert json.loads(await ws.recv())["event"] == "task_started"
        await ws.send(json.dumps({"event": "task_continue", "text": TEXT["input"]}))
        pcm = b""
        while not (msg := json.loads(await ws.recv()))["is_final"]:
            pcm += bytes.fromhex(msg["data"]["audio"])
    assert len(pcm) > 0
