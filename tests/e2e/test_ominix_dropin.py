"""OminiX-API drop-in paths across deployments: the per-family audio routes on the session
graph (404 without a model of the family), and a second application ("dropin": TTS only, two
replicas) started as an OminiX-API user starts theirs: TTS_REF_AUDIO set, and the qwen3-tts
family pointed at the built-in TTS model, so /v1/audio/tts/qwen3 and /tts/clone serve."""

from __future__ import annotations

import base64

import pytest

from tests.assertions import assert_openai_error, wait_for
from tests.e2e.test_voices_api import tone_wav

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


@pytest.fixture(scope="module")
def dropin(server, cache_dir, tmp_path_factory):
    import httpx
    from ray import serve

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    work = tmp_path_factory.mktemp("dropin")
    reference = work / "reference.wav"
    reference.write_bytes(tone_wav(330, 1.5))
    args = {
        "cache_dir": str(cache_dir),
        "llm": {"enabled": False},
        "asr": {"enabled": False},
        "image": {"enabled": False},
        "tts": {"voices_config": str(work / "voices.json"), "aliases": {"qwen3-tts": TINY_TTS}},
    }
    config = GraphArgs.from_args(args, environ={"TTS_REF_AUDIO": str(reference)})
    app = build_graph(config, options={"TTS": {"num_replicas": 2}})
    serve.run(app, name="dropin", route_prefix="/dropin", blocking=False)
    client = httpx.Client(base_url=f"{server}/dropin", timeout=120)

    def two_replicas_ready():
        r = client.get("/v1/models/status")
        return r.status_code == 200 and len(r.json()["slots"]["tts"]["replicas"]) == 2

    wait_for(two_replicas_ready, 180)
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
