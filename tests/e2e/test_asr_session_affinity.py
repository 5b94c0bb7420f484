"""Streaming sessions on two ASR replicas: every request of a session reaches the replica that
holds it (SessionAffinityRouter and sids that name their replica), sessions spread over both,
the session list covers both, and a killed replica's sessions answer that they were lost (410)
while the other replica's sessions go on.

Runs one more application ("asr-sessions": two ASR replicas of the tiny whisper, no other
slot, tiny CPU shares) in the session's cluster, as tests/e2e/test_llm_affinity.py does.
"""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest

from deployments.routing.affinity import owner_of
from tests.assertions import assert_openai_error, only_slots, replica_ids, wait_for

APP = "asr-sessions"
SMALL = {"ray_actor_options": {"num_cpus": 0.01}}
SESSIONS = "/v1/audio/stream/sessions"
CHUNK = (np.sin(np.arange(8000) / 5) * 8000).astype("<i2").tobytes()  # 0.5 s of loud tone


@pytest.fixture(scope="module")
def two_asr(server, cache_dir):
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    args = {
        "cache_dir": str(cache_dir),
        **only_slots("asr"),
        "asr": {"default_model": "ominix-tiny-whisper", "models": []},
    }
    router = RequestRouterConfig(
        request_router_class="deployments.routing.router.SessionAffinityRouter", request_router_kwargs={}
    )
    options = {"ASR": {"num_replicas": 2, "request_router_config": router, **SMALL}, "Ingress": SMALL, "Control": SMALL}
    serve.run(build_graph(GraphArgs.from_args(args), options=options), name=APP, route_prefix=f"/{APP}", blocking=False)
    http = httpx.Client(base_url=f"{server}/{APP}", timeout=120)
    yield http, replica_ids(http, "asr")
    http.close()
    serve.delete(APP)


def test_sessions_stick_to_their_replica_and_a_killed_one_loses_its_sessions(two_asr):
    import ray

    http, ids = two_asr
    sids = [http.post(SESSIONS).json()["sid"] for _ in range(12)]
    owners = {sid: owner_of(sid) for sid in sids}
    assert set(owners.values()) == set(ids), owners  # creation spreads over both replicas
    for sid in sids:
        r = http.post(f"{SESSIONS}/{sid}", content=CHUNK)
        assert r.status_code == 200 and r.json()["received_s"] == 0.5, r.text

    async def all_at_once():
        # Concurrent requests of different sessions must not swap replicas (Serve's multiplex
        # mixin would hand a chosen replica to whichever request is first in its queue).
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=120) as client:
            return await asyncio.gather(*(client.post(f"{SESSIONS}/{sid}", content=CHUNK) for sid in sids))

    for n in (2, 3):
        answers = asyncio.run(all_at_once())
        assert [r.status_code for r in answers] == [200] * 12, [r.text for r in answers if r.status_code != 200]
        assert [r.json()["received_s"] for r in answers] == [0.5 * n] * 12  # each session's own state
    r = http.get(SESSIONS)  # both replicas, one after the other (docs/routing.md)
    assert r.status_code == 200, r.text
    listed = r.json()
    assert {s["sid"] for s in listed["sessions"]} == set(sids) and listed["live"] == 12

    victim = owners[sids[0]]
    ray.kill(ray.get_actor(f"SERVE_REPLICA::{APP}#ASR#{victim}", namespace="serve"), no_restart=True)
    lost = [sid for sid in sids if owners[sid] == victim]
    kept = [sid for sid in sids if owners[sid] != victim]

    def answers_lost():
        r = http.post(f"{SESSIONS}/{lost[0]}", content=CHUNK)
        return r if r.status_code == 410 else None

    error = assert_openai_error(wait_for(answers_lost, 60, 1), 410, "sid", "session_lost")
    assert "lost" in error["message"]
    for sid in lost[1:]:
        assert_openai_error(http.post(f"{SESSIONS}/{sid}", content=CHUNK), 410, code="session_lost")
    for sid in kept:
        r = http.post(f"{SESSIONS}/{sid}", params={"finish": 1})
        assert r.status_code == 200 and r.json()["final"] and r.json()["received_s"] == 1.5, r.text
