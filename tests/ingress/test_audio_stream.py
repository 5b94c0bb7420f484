"""The streaming-session routes' own logic in process (fake ASR slot): every session call carries
its sid as the routing key, sids that name no replica never reach a slot, a replica that died
under a session is a 410 saying the session was lost, the cap's 429 keeps its Retry-After, the
list merges every replica's answer, keys are enforced as on every route, and a diarized session
(a real SessionHost, fakes.level_voices for the speaker encoder) labels its segments."""

from __future__ import annotations

import httpx
import pytest

from deployments.asr.streaming import SessionTable, StreamConfig
from deployments.ingress.app import create_app
from deployments.protocol.errors import APIError
from deployments.routing.affinity import replica_key
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.ingress.fakes import FakeClient, pcm, session_host, streaming_asr

SESSIONS = "/v1/audio/stream/sessions"
SID = replica_key("replica-a", "tok")


def state_answer(sid, pcm=b"", finish=False, model=None):
    return {"sid": sid, "text": "", "partial": "", "buffer_s": len(pcm) / 32000, "final": finish, "segments": []}


@pytest.fixture
def slots():
    slots = default_slots()
    slots["asr"] = FakeClient(
        stream_create=lambda language, overrides, diarize, prompt, logprobs, model=None: {
            "sid": SID,
            "model": model,
            "sample_rate": 16000,
        },
        stream_feed=state_answer,
        stream_state=lambda sid, model=None: state_answer(sid),
        stream_delete=lambda sid, model=None: {"sid": sid, "deleted": True},
    )
    return slots


async def test_session_calls_are_routed_by_their_sid(http, slots):
    asr = slots["asr"]
    r = await http.post(SESSIONS, params={"model": "whisper-tiny.en", "language": "en"})
    assert r.json()["sid"] == SID and asr.calls[0] == (
        "stream_create",
        ("en", None, False, None, False),
        "whisper-tiny.en",
    )
    r = await http.post(f"{SESSIONS}/{SID}", content=b"\x00\x00" * 8000, params={"finish": "1"})
    assert r.status_code == 200 and r.json()["final"] and r.json()["buffer_s"] == 0.5
    assert (await http.get(f"{SESSIONS}/{SID}")).status_code == 200
    assert (await http.delete(f"{SESSIONS}/{SID}")).json()["deleted"]
    assert asr.sessions == [None, SID, SID, SID]  # creation goes anywhere, the rest to the sid's replica
    assert asr.calls[1] == ("stream_feed", (SID, b"\x00\x00" * 8000, True), None)


async def test_a_sid_that_names_no_replica_never_reaches_the_slot(http, slots):
    for method in ("post", "get", "delete"):
        assert_openai_error(await getattr(http, method)(f"{SESSIONS}/not-a-sid"), 404, "sid", "session_not_found")
    assert slots["asr"].calls == []


async def test_bad_flags_are_400s_before_the_slot(http, slots):
    assert_openai_error(await http.post(f"{SESSIONS}/{SID}", params={"finish": "maybe"}), 400, "finish")
    assert_openai_error(await http.post(SESSIONS, params={"diarize": "maybe"}), 400, "diarize")
    assert_openai_error(await http.post(SESSIONS, params={"model": "nope"}), 404, "model", "model_not_found")
    assert slots["asr"].calls == []


async def test_a_replica_that_died_under_a_session_means_the_session_was_lost(http, slots):
    def died(*args, model=None):
        raise APIError(503, "A model replica died", "service_unavailable", code="replica_died")

    slots["asr"].answers["stream_feed"] = died
    error = assert_openai_error(await http.post(f"{SESSIONS}/{SID}", content=b"\x00\x00"), 410, "sid", "session_lost")
    assert "lost" in error["message"]


async def test_the_session_cap_is_a_429_with_retry_after(http, slots):
    table = SessionTable(1, 600, lambda t: replica_key("r", t))
    table.create(None, StreamConfig())

    def full(language, overrides, diarize, prompt, logprobs, model=None):
        table.create(None, StreamConfig())

    slots["asr"].answers["stream_create"] = full
    r = await http.post(SESSIONS)
    assert_openai_error(r, 429, code="too_many_sessions")
    assert int(r.headers["retry-after"]) > 0


class Control:
    """The control plane's status: two ASR replicas, one of them gone (still listed)."""

    async def call(self, method, *args, **kwargs):
        assert method == "status"
        return {"asr": {"replicas": [{"replica_id": "a"}, {"replica_id": "b"}, {"replica_id": "gone"}]}}


async def test_the_list_merges_every_replica_once(tmp_path):
    slots = default_slots()
    answers = {"a": ["@a/1", "@a/2"], "b": ["@b/1"]}

    def listing(model=None):
        raise AssertionError("listed without a replica key")

    client = FakeClient(stream_sessions=listing)

    async def call(method, *args, model=None, session=None):
        replica = session.split("/")[0][1:]
        served_by = replica if replica in answers else "a"  # a dead replica's key lands elsewhere
        return {"replica": served_by, "live": 1, "sessions": [{"sid": s} for s in answers[served_by]]}

    client.call = call
    slots["asr"] = client
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={})
    app = create_app(ingress_state(config, slots, control=Control()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.get(SESSIONS)
    assert r.json() == {"live": 3, "sessions": [{"sid": "@a/1"}, {"sid": "@a/2"}, {"sid": "@b/1"}]}


async def test_session_routes_need_the_key_when_keys_are_set(slots, tmp_path):
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={"OMINIX_API_KEY": "secret"})
    app = create_app(ingress_state(config, slots))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        for method, path in (("post", SESSIONS), ("get", SESSIONS), ("post", f"{SESSIONS}/{SID}")):
            assert_openai_error(await getattr(http, method)(path), 401, code="invalid_api_key")
        r = await http.post(SESSIONS, headers={"Authorization": "Bearer secret"})
        assert r.status_code == 200
    assert [c[0] for c in slots["asr"].calls] == ["stream_create"]


async def test_a_diarized_session_gives_every_segment_a_speaker(http, slots):
    slots["asr"].answers.update(streaming_asr(session_host()[0]).answers)  # a real host behind the slot
    r = await http.post(SESSIONS, params={"diarize": "1"})
    assert r.status_code == 200, r.text
    sid = r.json()["sid"]
    assert slots["asr"].calls[0][1][2] is True
    for level in (8000, 16000, 8000, 16000):  # voices A, B, A, B, a pause after each
        r = await http.post(f"{SESSIONS}/{sid}", content=pcm(1.0, True, level=level) + pcm(1.0, False))
        assert r.status_code == 200, r.text
    done = (await http.post(f"{SESSIONS}/{sid}", params={"finish": "1"})).json()
    assert done["final"] and done["speakers"] == 2
    assert [s["speaker"] for s in done["segments"]] == [0, 1, 0, 1]
    plain = (await http.post(SESSIONS)).json()["sid"]
    await http.post(f"{SESSIONS}/{plain}", content=pcm(1.0, True) + pcm(1.0, False))
    answer = (await http.post(f"{SESSIONS}/{plain}", params={"finish": "1"})).json()
    assert "speakers" not in answer and "speaker" not in answer["segments"][0]
