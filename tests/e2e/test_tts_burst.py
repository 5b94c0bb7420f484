"""A burst of speech requests: the TTS deployment scales above one replica, every request
completes with the right audio, chat stays responsive during the burst, and the replicas
return to the minimum after the downscale delay.

The shared graph keeps serve_config.yaml's delays (minutes to come down), so this test
deploys its own application (`tts-burst`, under /burst) with short delays and fast metric
pushes, on the same Serve instance, and deletes it at the end. The voice it speaks with is
registered through the shared graph: the burst's fresh replicas find it in the registry file.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import numpy as np
import pytest
import websockets

from deployments.audio.encode import encode_wav
from deployments.tts.tiny_model import TINY_TTS_ID

pytestmark = [
    pytest.mark.slow,
    # Metric pushes are set through env vars now (FAST_METRICS), which Serve's config check
    # of look_back_period_s against the deprecated metrics_interval_s does not know about.
    pytest.mark.filterwarnings("ignore:`look_back_period_s`:FutureWarning"),
]

BURST = 8
TEXT = " ".join(["The quick brown fox jumps over the lazy dog, then it runs far away."] * 120)
FAST_METRICS = {
    "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
    "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
}
SCALING = {
    "min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 1,
    "upscale_delay_s": 1, "downscale_delay_s": 5, "look_back_period_s": 2,
}


def running_replicas(app: str = "tts-burst", deployment: str = "TTS") -> int:
    from ray import serve

    status = serve.status().applications[app].deployments[deployment]
    return int(status.replica_states.get("RUNNING", 0))


@pytest.fixture(scope="module")
def burst_app(server, cache_dir):
    from ray import serve

    from deployments.ingress.deployment import Ingress
    from deployments.tts.deployment import TTSSlot

    actor = {"num_cpus": 0.1, "runtime_env": {"env_vars": FAST_METRICS}}
    tts = TTSSlot.options(autoscaling_config=SCALING, max_ongoing_requests=2, ray_actor_options=actor).bind(
        {"default_model": TINY_TTS_ID, "max_input_chars": 20000, "ws_idle_timeout_s": 1.5}, cache_dir=str(cache_dir)
    )
    app = Ingress.options(ray_actor_options=actor).bind({"tts": {"models": [TINY_TTS_ID]}}, tts=tts)
    serve.run(app, name="tts-burst", route_prefix="/burst")
    try:
        yield f"{server}/burst"
    finally:
        serve.delete("tts-burst")


@pytest.fixture
def burst_voice(http):
    t = np.arange(16000) / 16000
    wav = encode_wav((0.4 * np.sin(2 * np.pi * 330 * t)).astype(np.float32), 16000)
    r = http.post("/v1/voices", data={"name": "burster"}, files={"reference_audio": ("b.wav", wav, "audio/wav")})
    assert r.status_code == 201, r.text
    yield "burster"
    http.delete("/v1/voices/burster")


async def full_length(cache_dir, text: str, voice: str) -> int:
    """Samples a complete synthesis gives (greedy tiny model: deterministic), run in-process."""
    from deployments.tts.engine import SpeechJob, TTSEngine
    from deployments.tts.sentences import split_sentences
    from deployments.tts.tiny_model import ensure_tiny_tts

    engine = await TTSEngine.start(TINY_TTS_ID, ensure_tiny_tts(cache_dir))
    try:
        job = SpeechJob(segments=split_sentences(text), preset=voice)
        return sum([chunk.size async for chunk in engine.synthesize(job)])
    finally:
        engine.shutdown()


async def test_client_going_away_stops_its_synthesis(burst_app, cache_dir):
    """Runs first, while the app has its single replica, so `stats` reads that replica."""
    from ray import serve

    stats = serve.get_deployment_handle("TTS", app_name="tts-burst").stats

    async def produced() -> int:
        return (await stats.remote())[TINY_TTS_ID]["samples"]

    assert running_replicas() == 1
    before = await produced()
    async with httpx.AsyncClient(timeout=60) as client:
        body = {"input": TEXT * 2, "voice": "marius", "response_format": "pcm"}
        async with client.stream("POST", f"{burst_app}/v1/audio/speech", json=body) as r:
            async for chunk in r.aiter_raw():
                if chunk:
                    break  # hang up after the first audio
    await asyncio.sleep(2)
    stopped_at = await produced()
    await asyncio.sleep(2)
    assert await produced() == stopped_at  # nothing more is generated for nobody
    assert 0 < stopped_at - before < await full_length(cache_dir, body["input"], "marius") / 2


async def until_one_replica(timeout_s: float = 90) -> None:
    """The app is back to its single replica (after earlier load, within the downscale delay)."""
    deadline = time.time() + timeout_s
    while running_replicas() > 1 and time.time() < deadline:
        await asyncio.sleep(1)
    assert running_replicas() == 1


async def test_burst_scales_up_completes_and_scales_down(burst_app, burst_voice, server):
    # On a loaded machine the previous test's synthesis can have scaled the app up already.
    await until_one_replica()
    peak = 1
    body = {"input": TEXT, "voice": burst_voice, "response_format": "pcm"}
    async with httpx.AsyncClient(timeout=300) as client:
        async def speak() -> bytes:
            r = await client.post(f"{burst_app}/v1/audio/speech", json=body)
            assert r.status_code == 200, r.text
            return r.content

        async def chat() -> float:
            t0 = time.perf_counter()
            r = await client.post(f"{server}/v1/chat/completions", json={
                "model": "ominix-tiny-qwen3", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                "temperature": 0})
            assert r.status_code == 200, r.text
            return time.perf_counter() - t0

        t0 = time.perf_counter()
        burst = [asyncio.create_task(speak()) for _ in range(BURST)]
        chat_latencies = []
        while not all(task.done() for task in burst):
            peak = max(peak, running_replicas())
            if len(chat_latencies) < 3:
                chat_latencies.append(await chat())
                chat_done_during_burst = not all(task.done() for task in burst)
                assert chat_done_during_burst, "the burst ended before chat could be checked"
            await asyncio.sleep(0.5)
        results = await asyncio.gather(*burst)
        burst_s = time.perf_counter() - t0

    print(f"burst of {BURST}: {burst_s:.1f}s, peak {peak} replicas, chat latencies {chat_latencies}")
    assert peak > 1
    assert len(set(results)) == 1 and len(results[0]) > 24000 * 2  # every replica spoke the same voice
    assert max(chat_latencies) < 10

    t_end = time.perf_counter()
    await until_one_replica()
    print(f"back to 1 replica {time.perf_counter() - t_end:.1f}s after the burst (downscale delay 5 s)")


async def test_websocket_idle_timeout(burst_app):
    """This app's TTS config sets a 1.5 s idle timeout (the shared graph ships 120 s)."""
    url = burst_app.replace("http://", "ws://") + "/ws/v1/tts"
    async with websockets.connect(url) as ws:
        assert json.loads(await ws.recv()) == {"event": "connected_success"}
        await ws.send(json.dumps({"event": "task_start"}))
        assert json.loads(await ws.recv())["event"] == "task_started"
        t0 = time.perf_counter()
        error = json.loads(await ws.recv())
        assert error["event"] == "error" and error["message"].startswith("Idle timeout")
        assert 1.0 < time.perf_counter() - t0 < 10
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
