"""Voices across nodes with no shared disk: the cluster holds the registry (Control), each TTS
replica mirrors it into its own node's voices.json (docs/multi-node.md, "Voices").

A head and two speech nodes, each a `ray start` process with its own HOME: the TTS slot's
registry is `~/.OminiX/models/voices.json`, so each node's replica keeps a different file and
voices/ directory, as on separate machines. Checked, through HTTP as a user would:

- a voice registered while only node A serves is in A's file; node B, joining later, starts its
  replica with the voice already in B's own file, pointing at B's own copy of the recording;
- a voice registered through either replica reaches the other's file through the long poll;
- with node A gone (killed, its home deleted), node B lists and speaks both voices, and speaks
  the first exactly as A did; a removal through B leaves B's file and is a 404 after.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from tests.assertions import wait_for
from tests.e2e.test_multinode import TINY_TTS, Cluster, graph_config, ready, start_graph, stop_graph
from tests.e2e.test_voices_api import tone_wav

pytestmark = pytest.mark.slow

REGISTRY = Path(".OminiX") / "models" / "voices.json"  # under each node's HOME


def node_env(home: Path) -> dict:
    """A machine of its own: its HOME; the cluster's token copied from the head's (as an
    operator copies ~/.ray/auth_token to each machine)."""
    return {"HOME": str(home), "RAY_AUTH_TOKEN_PATH": str(Path.home() / ".ray" / "auth_token")}


def two_replicas_one_per_node(app: dict) -> None:
    tts = app["args"]["tts"]
    tts["voices_config"] = "~/" + str(REGISTRY)  # expanded by each replica: its node's HOME
    tts["default_model"] = TINY_TTS  # clones; lighter than Kokoro on a small machine
    deployment = next(d for d in app["deployments"] if d["name"] == "TTS")
    deployment.pop("autoscaling_config", None)
    deployment["num_replicas"] = 2
    deployment["max_replicas_per_node"] = 1


@pytest.fixture(scope="module")
def graph(tmp_path_factory, cache_dir):
    work = tmp_path_factory.mktemp("multinode-voices")
    cluster = Cluster(work)
    homes = {"a": work / "home-a", "b": work / "home-b"}
    serve_proc = None
    try:
        cluster.start("head", "head", head=True)
        wait_for(lambda: len(cluster.alive_nodes()) == 1, 240)
        cluster.join("speech-a", "speech", env=node_env(homes["a"]))
        config, port = graph_config(work, cache_dir, slots=("tts",), edit=two_replicas_one_per_node)
        serve_proc = start_graph(cluster, config)
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        wait_for(lambda: ready(http, serve_proc, work, slots=("tts",)), 400)
        yield cluster, http, homes
    finally:
        stop_graph(serve_proc)
        cluster.stop_all()


def registered(home: Path) -> dict:
    path = home / REGISTRY
    return json.loads(path.read_text())["voices"] if path.exists() else {}


def tts_replicas(http: httpx.Client) -> int:
    return len(http.get("/v1/models/status").json()["slots"]["tts"]["replicas"])


def register(http: httpx.Client, name: str, freq: float) -> None:
    files = {"reference_audio": ("ref.wav", tone_wav(freq), "audio/wav")}
    r = http.post("/v1/voices", data={"name": name, "reference_text": "a tone"}, files=files)
    assert r.status_code == 201, r.text


def speak(http: httpx.Client, voice: str) -> httpx.Response:
    return http.post("/v1/audio/speech", json={"input": "Hello there.", "voice": voice, "response_format": "pcm"})


def test_a_voice_registered_on_one_node_is_listed_and_spoken_on_another_without_a_shared_disk(graph):
    cluster, http, homes = graph
    a, b = homes["a"], homes["b"]

    # Only node A serves: the voice lands in the cluster and in A's own file.
    register(http, "anna", 220)
    assert registered(a)["anna"]["ref_audio"].startswith(str(a))
    spoken_on_a = speak(http, "anna")
    assert spoken_on_a.status_code == 200 and len(spoken_on_a.content) > 0

    # Node B joins: its replica syncs before it serves, into B's own file and directory.
    cluster.join("speech-b", "speech", env=node_env(b))
    wait_for(lambda: tts_replicas(http) == 2, 400)
    anna_on_b = registered(b)["anna"]
    assert anna_on_b["ref_audio"].startswith(str(b)) and Path(anna_on_b["ref_audio"]).is_file()
    assert Path(anna_on_b["ref_audio"]).read_bytes() == Path(registered(a)["anna"]["ref_audio"]).read_bytes()

    # Registered through whichever replica the request reaches: the other follows (long poll).
    register(http, "bruno", 330)
    wait_for(lambda: "bruno" in registered(a) and "bruno" in registered(b), 30)
    assert registered(b)["bruno"]["ref_audio"].startswith(str(b))

    # Node A goes away with its disk: B alone lists and speaks both voices.
    cluster.kill("speech-a")
    shutil.rmtree(a)
    wait_for(lambda: tts_replicas(http) == 1, 90)  # A's replica stops reporting
    wait_for(lambda: speak(http, "anna").status_code == 200, 90)
    names = {v["name"] for v in http.get("/v1/voices").json()["voices"]}
    assert {"anna", "bruno"} <= names
    for _ in range(3):  # every request now reaches B
        assert speak(http, "anna").content == spoken_on_a.content  # the same recording, B's copy
        assert speak(http, "bruno").status_code == 200

    # A removal through B: gone from the cluster and from B's file.
    assert http.delete("/v1/voices/anna").json() == {"name": "anna", "deleted": True}
    assert "anna" not in registered(b) and "bruno" in registered(b)
    assert speak(http, "anna").status_code == 404
    assert http.delete("/v1/voices/bruno").status_code == 200
