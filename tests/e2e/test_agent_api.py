"""POST /v1/agent/stream on the live graph: the LLM slot's answer spoken sentence by sentence
by the TTS slot, and a client that hangs up stops both."""

from __future__ import annotations

import base64
import json
import threading
import time

import httpx
import pytest

from deployments.tts.tiny_model import TINY_TTS_ID
from tests.assertions import assert_openai_error, only_slots, wait_for


def sse_events(lines) -> tuple[list[dict], bool]:
    events, done = [], False
    for line in lines:
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events, done


def test_an_answer_is_spoken_sentence_by_sentence(http):
    # The tiny TTS model: the check is the sentence-by-sentence pipeline, not Kokoro's speech
    # (its round trip is tests/e2e/test_kokoro_api.py), and it keeps the test fast on 2 cores.
    body = {
        "input": "Name three colors.",
        "voice": "alba",
        "tts_model": TINY_TTS_ID,
        "max_tokens": 48,
        "temperature": 0,
    }
    r = http.post("/v1/agent/stream", json=body, timeout=300)
    assert r.status_code == 200, r.text
    events, done = sse_events(r.text.splitlines())
    assert done and "error" not in events[-1], events[-1]
    meta = events[0]
    assert meta["type"] == "meta" and meta["voice"] == "alba" and meta["model"] == "ominix-smollm2-135m-instruct"
    assert meta["tts_model"] == TINY_TTS_ID
    assert meta["sample_rate"] == int(r.headers["x-audio-sample-rate"]) > 0
    texts = [e["text"] for e in events if e["type"] == "text"]
    assert texts and all(t.strip() for t in texts)
    pcm = b"".join(base64.b64decode(e["delta"]) for e in events if e["type"] == "audio")
    assert len(pcm) % 2 == 0 and len(pcm) / 2 / meta["sample_rate"] > 0.2  # real audio came back
    assert events[1]["type"] == "text"  # a sentence's text comes before its audio


def test_bad_input_is_a_400_and_an_unknown_voice_a_404(http):
    assert_openai_error(http.post("/v1/agent/stream", json={"input": ""}), 400, param="input")
    r = http.post("/v1/agent/stream", json={"input": "hi", "voice": "nobody-at-all"})
    assert_openai_error(r, 404, param="voice")


@pytest.fixture(scope="module")
def single_replicas(server, cache_dir):
    """The agent's two slots with one replica each (tiny LLM by default), next to the graph: the
    session graph autoscales, and /metrics answers from one replica, which Serve's router picks
    among the least busy, so only a single replica's in-flight counts are certain."""
    from ray import serve

    from deployments.llm.tiny_model import TINY_LLM_ID
    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    # Only the agent's two slots: the others' replicas would load models no test here uses.
    args = {
        "cache_dir": str(cache_dir),
        **only_slots("llm", "tts"),
        "llm": {"default_model": TINY_LLM_ID, "models": []},
    }
    one = {"num_replicas": 1}
    app = build_graph(GraphArgs.from_args(args, environ={}), {"LLM": one, "TTS": one})
    serve.run(app, name="agent-single", route_prefix="/agent-single", blocking=False)
    url = f"{server}/agent-single"
    with httpx.Client(base_url=url, timeout=60) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout_s=240)
        yield client
    serve.delete("agent-single")


def _engine_totals(client, slot: str, key: str) -> int:
    return sum(m.get(key, 0) for m in client.get("/metrics").json()[slot]["models"].values())


def _in_flight(client) -> tuple[int, int]:
    """(LLM sequences running, TTS syntheses active or queued)."""
    tts = _engine_totals(client, "tts", "active") + _engine_totals(client, "tts", "pending")
    return _engine_totals(client, "llm", "running"), tts


class InFlightLog:
    """Samples both slots' in-flight counts on a thread while the test streams."""

    def __init__(self, url: str):
        self.samples: list[tuple[float, int, int]] = []
        self.both_busy = threading.Event()  # a sample saw the LLM writing and the TTS speaking
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self._t0 = time.monotonic()

    def _run(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not self._stop.is_set():
                llm, tts = _in_flight(client)
                self.samples.append((round(time.monotonic() - self._t0, 2), llm, tts))
                if llm and tts:
                    self.both_busy.set()
                time.sleep(0.05)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def mark(self) -> float:
        return round(time.monotonic() - self._t0, 2)


def test_a_client_hang_up_stops_the_generation_and_the_synthesis(single_replicas):
    client = single_replicas
    wait_for(lambda: _in_flight(client) == (0, 0), timeout_s=60)
    aborted, jobs = _engine_totals(client, "llm", "aborted"), _engine_totals(client, "tts", "jobs")
    # The random-weight tiny LLM, greedy: this input runs on to max_tokens (no EOS, no tag the
    # output parser acts on), so the LLM is still writing when the client hangs up, however
    # slowly a loaded machine streams. ("hi" ends after 354 tokens: on a busy CI box the
    # generation was over before the first audio arrived, and nothing was left to abort.)
    body = {"input": "Tell me a story.", "max_tokens": 4000, "temperature": 0, "voice": "marius"}
    seen = []
    with InFlightLog(str(client.base_url)) as log:
        with client.stream("POST", "/v1/agent/stream", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                seen.append((log.mark(), line[:100]))
                if '"type":"audio"' in line and log.both_busy.is_set():
                    break  # audio is playing and both slots are at work: hang up now
        # leaving the block closed the connection mid-stream
        time.sleep(1)
    timeline = f"events {seen}, (s, llm, tts) {log.samples}"
    assert log.both_busy.is_set(), f"the stream ended before both slots were seen busy: {timeline}"
    wait_for(lambda: _in_flight(client) == (0, 0), timeout_s=30, interval=0.3)
    assert _engine_totals(client, "llm", "aborted") == aborted + 1, timeline  # stopped, not left to finish
    started = _engine_totals(client, "tts", "jobs") - jobs  # the voice check, then sentences
    time.sleep(2)
    assert _engine_totals(client, "tts", "jobs") - jobs == started  # nothing more for nobody
