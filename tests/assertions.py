"""Assertions and waits every test layer shares (in-process ingress tests and the live graph)."""

import json
import time


def assert_openai_error(r, status, param=None, code=None):
    """An OpenAI-shaped JSON error body with the expected status (and param / code)."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


def wait_for(predicate, timeout_s: float = 120, interval: float = 0.5):
    """Poll until `predicate()` returns something truthy (returned), or fail after `timeout_s`."""
    deadline, value = time.time() + timeout_s, None
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not reached in {timeout_s} s (last: {value!r})")


def replica_ids(http, slot: str, count: int = 2, timeout_s: float = 240) -> list[str]:
    """The ids of a small app's `count` replicas of `slot`, once all report to its control plane
    (`http`: a client of the app)."""

    def reported():
        r = http.get("/v1/models/status")
        ids = [x["replica_id"] for x in r.json()["slots"][slot]["replicas"]] if r.status_code == 200 else []
        return ids if len(ids) == count else None

    return wait_for(reported, timeout_s)


def only_slots(*names: str) -> dict:
    """Graph args that turn off every slot of the registry but `names` (a test's small app)."""
    from deployments.slots import SLOTS

    return {slot: {"enabled": False} for slot in SLOTS if slot not in names}


async def ws_tts_audio(ws) -> bytes:
    """The audio of one `task_continue` on the WebSocket TTS protocol (MiniMax T2A): every
    `task_progress` event's hex chunk up to the final one; any other event fails the test."""
    audio = b""
    while True:
        message = json.loads(await ws.recv())
        assert message["event"] == "task_progress", message
        if message["is_final"]:
            return audio
        audio += bytes.fromhex(message["data"]["audio"])
