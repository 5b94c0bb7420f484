"""OminiX-API drop-in paths across deployments: the per-family audio routes on the session
graph (404 without a model of the family), and a second application ("dropin": TTS only, two
replicas) started as an OminiX-API user starts theirs: TTS_REF_AUDIO set, the qwen3-tts family
pointed at the built-in TTS model (so /v1/audio/tts/qwen3 and /tts/clone serve), and the
ingress's HF_ENDPOINT at a fake hub on a loopback socket (the model downloads)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from deployments.audio.encode import encode_wav
from deployments.resources import reserve
from tests.assertions import assert_openai_error, only_slots, wait_for
from tests.e2e.test_voices_api import tone_wav
from tests.fake_hub import running_hub

TINY_TTS = "ominix-tiny-pocket-tts"


@pytest.mark.parametrize(
    ("path", "kwargs"),
    [
        ("/v1/audio/tts/qwen3", {"json": {"input": "Hello."}}),
        ("/v1/audio/tts/sovits", {"json": {"input": "Hello.", "voice": "doubao"}}),
        ("/v1/audio/tts/clone", {"data": {"input": "Hello."}, "files": {"reference_audio": ("r.wav", b"RIFF")}}),
        ("/v1/audio/asr/qwen3", {"json": {"file": base64.b64encode(b"RIFF").decode()}}),
        ("/v1/audio/asr/paraformer", {"json": {"file": base64.b64encode(b"RIFF").decode()}}),
    ],
)
def test_family_routes_without_their_family_are_404_on_the_default_graph(http, path, kwargs):
    assert_openai_error(http.post(path, **kwargs), 404, param="model", code="model_not_found")


HUB_REPO = "acme/tiny-voice"
HUB_FILES = {"config.json": b"{}", "model.safetensors": bytes(range(256)) * 8000}


@pytest.fixture(scope="module")
def hub():
    with running_hub({HUB_REPO: HUB_FILES}) as hub:
        yield hub


@pytest.fixture(scope="module")
def dropin(server, cache_dir, tmp_path_factory, hub):
    import httpx
    from ray import serve

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    work = tmp_path_factory.mktemp("dropin")
    reference = work / "reference.wav"
    reference.write_bytes(tone_wav(330, 1.5))
    args = {
        "cache_dir": str(cache_dir),
        **only_slots("tts"),  # the drop-in behaviours here are the TTS slot's
        "tts": {
            "voices_config": str(work / "voices.json"),
            "aliases": {"qwen3-tts": TINY_TTS},
            "models": [HUB_REPO],
        },
    }
    config = GraphArgs.from_args(args, environ={"TTS_REF_AUDIO": str(reference)})
    hub_env = {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": str(work / "hub")}
    ingress = {"ray_actor_options": {**reserve(0.1, 256), "runtime_env": {"env_vars": hub_env}}}
    app = build_graph(config, options={"TTS": {"num_replicas": 2}, "Ingress": ingress})
    serve.run(app, name="dropin", route_prefix="/dropin", blocking=False)
    client = httpx.Client(base_url=f"{server}/dropin", timeout=120)

    def two_replicas_ready():
        r = client.get("/v1/models/status")
        return r.status_code == 200 and len(r.json()["slots"]["tts"]["replicas"]) == 2

    wait_for(two_replicas_ready, 180)
    client.hub_cache = work / "hub"
    yield client
    client.close()
    serve.delete("dropin")


def test_tts_ref_audio_is_the_default_voice_on_every_replica(dropin):
    voices = dropin.get("/v1/voices").json()
    assert voices["default_voice"] == "reference"
    assert {"name": "reference", "aliases": [], "source": "startup"} in voices["voices"]
    named = dropin.post("/v1/audio/speech", json={"input": "Hello there.", "voice": "reference"})
    assert named.status_code == 200 and len(named.content) > 44
    # Requests spread over both replicas (Serve's power-of-two choice): each answers the same voice.
    unnamed = [dropin.post("/v1/audio/speech", json={"input": "Hello there."}).content for _ in range(8)]
    assert set(unnamed) == {named.content}
    preset = dropin.post("/v1/audio/speech", json={"input": "Hello there.", "voice": "alba"})
    assert preset.content != named.content
    assert_openai_error(dropin.delete("/v1/voices/reference"), 404, code="voice_not_found")  # not in the file


def test_family_routes_serve_the_model_their_alias_names(dropin):
    r = dropin.post("/v1/audio/tts/qwen3", json={"input": "Hello there.", "voice": "alba"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    same = dropin.post("/v1/audio/speech", json={"input": "Hello there.", "voice": "alba", "model": TINY_TTS})
    assert r.content == same.content
    pcm = dropin.post("/v1/audio/tts/qwen3?format=pcm", json={"input": "Hello there."})
    assert pcm.headers["content-type"] == "audio/pcm" and pcm.headers["x-audio-sample-rate"] == "24000"
    files = {"reference_audio": ("me.wav", tone_wav(440, 1.0, 24000), "audio/wav")}
    cloned = dropin.post("/v1/audio/tts/clone", data={"input": "Hello there."}, files=files)
    assert cloned.status_code == 200 and cloned.content[:4] == b"RIFF" and cloned.content != r.content
    assert_openai_error(dropin.post("/v1/audio/tts/sovits", json={"input": "Hi."}), 404, code="model_not_found")


def test_a_model_download_through_the_fake_hub_then_its_removal(dropin, hub):
    def entry():
        return next(e for e in dropin.get("/v1/models/catalog").json()["models"] if e["id"] == HUB_REPO)

    assert entry()["status"] == "not_downloaded"
    hub.bytes_per_s = 1_000_000  # 2 s for the weights: the stream shows them coming
    r = dropin.post("/v1/models/download", json={"model_id": HUB_REPO})
    assert r.status_code == 200, r.text
    with dropin.stream("GET", "/v1/models/download/progress", params={"model_id": HUB_REPO}) as events:
        states = [json.loads(line[6:])["state"] for line in events.iter_lines() if line.startswith("data: ")]
    assert states[-1] == "ready" and "downloading" in states
    assert entry()["status"] == "ready"
    assert (dropin.hub_cache / "models--acme--tiny-voice").is_dir()
    assert any(path.endswith("/model.safetensors") for _, path in hub.requests)
    r = dropin.post("/v1/models/remove", json={"model_id": HUB_REPO})
    assert r.status_code == 200 and not (dropin.hub_cache / "models--acme--tiny-voice").exists()
    assert_openai_error(dropin.post("/v1/models/remove", json={"model_id": TINY_TTS}), 409, code="builtin_model")


def test_a_trained_voice_is_spoken_by_name_on_every_replica(dropin):
    # A cosine: loud at both ends, so the pipeline's silence trimming keeps every sample.
    t = np.arange(2 * 24000) / 24000
    reference = encode_wav((0.4 * np.cos(2 * np.pi * 260 * t)).astype(np.float32), 24000)
    body = {"voice_name": "trained", "audio": base64.b64encode(reference).decode(), "transcript": "A low tone."}
    r = dropin.post("/v1/voices/train", json=body)
    assert r.status_code == 200, r.text
    task_id = r.json()["task_id"]
    with dropin.stream("GET", "/v1/voices/train/progress", params={"task_id": task_id}) as events:
        stages = [json.loads(line[6:])["stage"] for line in events.iter_lines() if line.startswith("data: ")]
    assert stages[-1] == "complete" and "failed" not in stages, stages
    # the conditioning computed once and cached, with the model it belongs to
    entry = json.loads((dropin.hub_cache.parent / "voices.json").read_text())["voices"]["trained"]
    assert entry["conditioning_model"] == TINY_TTS and Path(entry["conditioning"]).is_file()
    status = dropin.get("/v1/voices/train/status", params={"task_id": task_id}).json()
    assert status["status"] == "complete" and status["progress"] == 1.0
    assert "trained" in [v["name"] for v in dropin.get("/v1/voices").json()["voices"]]
    # The cached conditioning speaks as cloning from the same reference does, on any replica.
    text = {"input": "Hello there.", "response_format": "pcm"}
    cloned = dropin.post("/v1/audio/speech", json={**text, "reference_audio": base64.b64encode(reference).decode()})
    spoken = {dropin.post("/v1/audio/speech", json={**text, "voice": "trained"}).content for _ in range(6)}
    assert spoken == {cloned.content}
    assert_openai_error(dropin.post("/v1/voices/train", json={**body, "audio": "%%%"}), 400, param="audio")
