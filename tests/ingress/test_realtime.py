"""The Realtime transcription WebSocket in process: the ingress's protocol over a real
SessionHost (one fake replica: a loudness VAD and a decoder that names each audio's length).
Server VAD and manual commits, event order, every error event, intent and authentication."""

from __future__ import annotations

import base64

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.ingress.conftest import ingress_state, shipped_args
from tests.ingress.fakes import pcm, streaming_asr

URL = "/v1/realtime?intent=transcription"


@pytest.fixture
def slots(slots, host):
    slots["asr"] = streaming_asr(host)
    return slots


def append(ws, audio: bytes) -> None:
    ws.send_json({"type": "input_audio_buffer.append", "audio": base64.b64encode(audio).decode()})


def until(ws, kind: str) -> list[dict]:
    """Events up to and including the first of `kind`."""
    seen = []
    while not seen or seen[-1]["type"] != kind:
        seen.append(ws.receive_json())
    return seen


def test_server_vad_ends_each_utterance_after_its_pause(app, host):
    with TestClient(app).websocket_connect(URL) as ws:
        created = ws.receive_json()
        assert created["type"] == "session.created"
        turn = created["session"]["audio"]["input"]["turn_detection"]
        assert turn["type"] == "server_vad" and created["session"]["audio"]["input"]["format"]["rate"] == 24000
        for loud, seconds in ((True, 0.6), (False, 0.4), (False, 0.4)):  # 24 kHz, OpenAI's default
            append(ws, pcm(seconds, loud, rate=24000))
        events = until(ws, "conversation.item.input_audio_transcription.completed")
        kinds = [e["type"] for e in events]
        assert kinds == [
            "input_audio_buffer.speech_started",
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.input_audio_transcription.delta",
            "conversation.item.input_audio_transcription.completed",
        ]
        started, stopped, committed, delta, completed = events
        assert started["audio_start_ms"] == 0 and 550 <= stopped["audio_end_ms"] <= 650
        assert len({e["item_id"] for e in events}) == 1 and committed["previous_item_id"] is None
        assert completed["transcript"] == delta["delta"] and completed["transcript"].startswith("utterance of 1.")
        assert completed["usage"]["type"] == "duration"
        # The second utterance follows the first.
        append(ws, pcm(0.5, True, rate=24000))
        append(ws, pcm(0.7, False, rate=24000))
        second = until(ws, "conversation.item.input_audio_transcription.completed")
        assert [e for e in second if e["type"] == "input_audio_buffer.committed"][0]["previous_item_id"] == started[
            "item_id"
        ]
    assert len(host.table) == 0  # the ASR session ended with the socket


def test_the_transcription_prompt_and_logprobs_reach_the_asr_session(app, host):
    """`transcription.prompt` is Whisper's prompt for every utterance; `include` logprobs puts the
    tokens' log-probabilities on the delta and completed events (the fake decoder has none)."""
    session = {
        "include": ["item.input_audio_transcription.logprobs"],
        "audio": {"input": {"transcription": {"prompt": "FIFA, quarterly"}}},
    }
    with TestClient(app).websocket_connect(URL) as ws:
        assert "include" not in ws.receive_json()["session"]
        ws.send_json({"type": "session.update", "session": session})
        assert until(ws, "session.updated")[-1]["session"]["include"] == session["include"]
        (live,) = host._live.values()
        assert live.options.prompt == "FIFA, quarterly" and live.options.logprobs
        for loud, seconds in ((True, 0.6), (False, 0.4), (False, 0.4)):
            append(ws, pcm(seconds, loud, rate=24000))
        *_, delta, completed = until(ws, "conversation.item.input_audio_transcription.completed")
        assert delta["logprobs"] == completed["logprobs"] == []


def test_manual_commits_and_clear(app):
    with TestClient(app).websocket_connect(URL) as ws:
        ws.receive_json()
        update = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}, "turn_detection": None}}}
        ws.send_json({"type": "session.update", "session": {"type": "transcription", **update}})
        updated = ws.receive_json()
        assert updated["type"] == "session.updated"
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        append(ws, pcm(0.5, True))
        append(ws, pcm(1.5, False))  # a long pause, but no server VAD: nothing happens
        ws.send_json({"type": "input_audio_buffer.commit"})
        events = until(ws, "conversation.item.input_audio_transcription.completed")
        assert [e["type"] for e in events][0] == "input_audio_buffer.committed"  # nothing before the commit
        assert events[-1]["transcript"] == "utterance of 2.00 s"
        ws.send_json({"type": "input_audio_buffer.commit", "event_id": "c2"})
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["code"] == "input_audio_buffer_commit_empty"
        assert error["error"]["event_id"] == "c2"
        append(ws, pcm(0.5, True))
        ws.send_json({"type": "input_audio_buffer.clear"})
        assert ws.receive_json()["type"] == "input_audio_buffer.cleared"
        ws.send_json({"type": "input_audio_buffer.commit"})
        assert ws.receive_json()["error"]["code"] == "input_audio_buffer_commit_empty"


@pytest.mark.parametrize(
    "message, param",
    [
        ("not json", None),
        ({"type": "response.create"}, "type"),
        ({"type": "input_audio_buffer.append", "audio": "!!!"}, "audio"),
        ({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()}, "audio"),
        ({"type": "input_audio_buffer.append"}, "audio"),
        (
            {"type": "session.update", "session": {"audio": {"input": {"format": {"rate": 44100}}}}},
            "session.audio.input.format.rate",
        ),
        (
            {"type": "session.update", "session": {"audio": {"input": {"turn_detection": {"type": "vad"}}}}},
            "session.audio.input.turn_detection",
        ),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}}},
            },
            "session.audio.input.turn_detection.eagerness",
        ),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"type": "semantic_vad", "threshold": 0.5}}}},
            },
            "session.audio.input.turn_detection.threshold",
        ),
        (
            {
                "type": "session.update",
                "session": {"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 2}}}},
            },
            "session.audio.input.turn_detection.threshold",
        ),
        ({"type": "session.update", "session": {"audio": {"input": {"transcription": {"model": "nope"}}}}}, "model"),
        ({"type": "session.update", "session": {"type": "realtime"}}, "session.type"),
    ],
)
def test_bad_events_get_error_events_and_the_socket_stays_open(app, message, param):
    with TestClient(app).websocket_connect(URL) as ws:
        ws.receive_json()
        ws.send_text(message) if isinstance(message, str) else ws.send_json(message)
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["param"] == param and error["error"]["message"]
        append(ws, pcm(0.1, False))  # still serving
        ws.send_json({"type": "input_audio_buffer.clear"})
        assert ws.receive_json()["type"] == "input_audio_buffer.cleared"


def test_a_connection_with_an_unknown_intent_is_refused(app):
    with TestClient(app).websocket_connect("/v1/realtime?intent=translation") as ws:
        error = ws.receive_json()
        assert error["type"] == "error" and error["error"]["param"] == "intent"


def test_a_lost_session_fails_the_item_and_closes(app, host):
    with TestClient(app).websocket_connect(URL) as ws:
        ws.receive_json()
        for sid in [s.sid for s in host.table]:
            host.delete(sid)  # as if the replica had lost it
        append(ws, pcm(0.1, True))
        failed = ws.receive_json()
        assert failed["type"] == "conversation.item.input_audio_transcription.failed"
        assert failed["error"]["code"] == "session_not_found"


@pytest.mark.parametrize("url", [URL, "/v1/realtime"])  # transcription, conversation
def test_the_key_as_header_or_browser_subprotocol(slots, tmp_path, url):
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={"OMINIX_API_KEY": "secret"})
    client = TestClient(create_app(ingress_state(config, slots)))
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect(url):
            pass
    assert denied.value.status_code == 401
    with client.websocket_connect(url, headers={"Authorization": "Bearer secret"}) as ws:
        assert ws.receive_json()["type"] == "session.created"
    with client.websocket_connect(url, subprotocols=["bearer", "secret"]) as ws:
        assert ws.accepted_subprotocol == "bearer" and ws.receive_json()["type"] == "session.created"
