"""The audio/WebSocket bad-input corpus (tests/corpus/bad_audio.py) against the ingress in
process: each HTTP case gets its 4xx and OpenAI error body, each WebSocket frame its error
event with the session going on; the slot-checked cases are the only ones that reach a slot
(the fakes answer 418 there; tests/e2e/test_bad_input_audio.py runs them on the live graph)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.assertions import assert_openai_error
from tests.corpus.bad_audio import HTTP_CASES, SLOT_CHECKED, WS_CASES, WS_SLOT_CHECKED, request_of, ws_frame
from tests.ingress import fakes


def test_corpus_counts():
    assert len(HTTP_CASES) + len(WS_CASES) >= 150
    assert SLOT_CHECKED <= {case.id for case in HTTP_CASES}


@pytest.mark.parametrize("path, method, request_kwargs, status, param", HTTP_CASES)
async def test_bad_audio_request_is_refused_by_the_ingress(
    http, slots, path, method, request_kwargs, status, param, request
):
    for client in slots.values():
        client.answers.clear()  # every slot call answers 418
    slots["tts"].answers["describe"] = fakes.tts_facts
    r = await http.request(method, path, **request_of(request_kwargs))
    if request.node.callspec.id in SLOT_CHECKED:
        assert r.status_code == 418, "a slot-checked case must pass the ingress (else move it out of SLOT_CHECKED)"
        return
    assert_openai_error(r, status, param)
    assert not any(call[0] != "describe" for client in slots.values() for call in client.calls)


@pytest.mark.parametrize("index", [i for i in range(len(WS_CASES)) if i not in WS_SLOT_CHECKED])
def test_bad_websocket_frame_gets_an_error_event_and_the_session_goes_on(app, slots, index):
    frame, expected = WS_CASES[index]
    with TestClient(app).websocket_connect("/ws/v1/tts") as ws:
        assert ws.receive_json() == {"event": "connected_success"}
        ws.send_bytes(frame) if isinstance(frame, bytes) else ws.send_text(ws_frame(frame))
        error = ws.receive_json()
        assert error["event"] == "error" and error["message"].startswith(expected), error
        ws.send_json({"event": "task_start", "voice_setting": {"voice_id": "alba"}})
        assert ws.receive_json()["event"] == "task_started"
    assert not any(call[0] == "synthesize" for call in slots["tts"].calls)
