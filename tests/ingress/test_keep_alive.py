"""keep_alive (Ollama's) at the ingress: a bad value is a 400 naming it before any slot is
called, on every route that takes it; a good one reaches the control plane for the model that
answered, once it answered (a stream: while it still runs); none means no call; a control plane
that cannot be reached costs the answer nothing. The idle unload itself runs on the real graph
(tests/e2e/test_idle_unload.py)."""

from __future__ import annotations

import base64
import io

import httpx
import pytest
from PIL import Image

from deployments.control.state import Desired
from deployments.ingress.app import create_app
from deployments.protocol.images import GeneratedImages
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.ingress.test_models import DEFAULTS, FakeControl

WAV = base64.b64encode(b"RIFF....WAVE").decode()


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(out, "PNG")
    return out.getvalue()


def generated(params, model=None) -> GeneratedImages:
    return GeneratedImages(model=model or DEFAULTS["image"], images=[png()], seeds=[1])


class KeepAliveControl(FakeControl):
    """Control's set_keep_alive, recorded with whether the LLM's stream was still running then."""

    def __init__(self, slots: dict, fail: bool = False):
        super().__init__(DEFAULTS)
        self.slots, self.fail = slots, fail
        self.kept: list[tuple] = []
        self.answers["set_keep_alive"] = self._keep

    def _keep(self, slot, kept_model, seconds, model=None):  # model: the handle's (none for Control)
        if self.fail:
            raise RuntimeError("Control is restarting")
        streams = self.slots[slot].streams
        self.kept.append((slot, kept_model, seconds, bool(streams) and streams[-1].in_flight))
        return Desired(slot=slot, model=kept_model, keep_alive={kept_model or "default": seconds})


def client(control=None, slots=None, tmp_path=None):
    slots = slots or default_slots()
    slots["image"] = fakes.FakeClient(generate=generated)
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path)), environ={})
    app = create_app(ingress_state(config, slots, control=control(slots) if control else None))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t"), slots, app


HI = [{"role": "user", "content": "Hi"}]

# (route, JSON body without keep_alive, the slot it reaches)
JSON_ROUTES = [
    ("/v1/chat/completions", {"messages": HI}, "llm"),
    ("/v1/completions", {"prompt": "Hi"}, "llm"),
    ("/v1/embeddings", {"input": "Hi"}, "embeddings"),
    ("/v1/images/generations", {"prompt": "a red square", "size": "64x64"}, "image"),
    ("/v1/audio/speech", {"input": "Hi"}, "tts"),
    ("/v1/audio/transcriptions", {"file": WAV}, "asr"),
    ("/v1/vlm/completions", {"image": base64.b64encode(png()).decode(), "prompt": "What?"}, "vlm"),
    ("/v1/chat/completions", {"model": DEFAULTS["vlm"], "messages": HI}, "vlm"),
]


@pytest.mark.parametrize("value", [-2, "-5m", "soon", True, "5 minutes", [], "inf"])
@pytest.mark.parametrize("route, body, slot", JSON_ROUTES, ids=[f"{r}-{s}" for r, _, s in JSON_ROUTES])
async def test_a_bad_keep_alive_is_a_400_naming_it_before_any_slot(tmp_path, route, body, slot, value):
    http, slots, _ = client(KeepAliveControl, tmp_path=tmp_path)
    async with http:
        error = assert_openai_error(await http.post(route, json={**body, "keep_alive": value}), 400, "keep_alive")
    assert "keep_alive" in error["message"]
    assert not slots[slot].calls


async def test_a_bad_keep_alive_in_a_transcription_form_is_a_400(tmp_path):
    http, slots, _ = client(KeepAliveControl, tmp_path=tmp_path)
    async with http:
        r = await http.post(
            "/v1/audio/transcriptions", files={"file": ("a.wav", b"RIFF....")}, data={"keep_alive": "-3"}
        )
    assert "negative" in assert_openai_error(r, 400, "keep_alive")["message"]
    assert not slots["asr"].calls


@pytest.mark.parametrize(
    "route, body, slot, kept_model",
    [
        ("/v1/chat/completions", {"model": "ominix-tiny-qwen3", "messages": HI}, "llm", "ominix-tiny-qwen3"),
        ("/v1/completions", {"prompt": "Hi"}, "llm", "ominix-tiny-qwen3"),  # the model the first chunk names
        ("/v1/embeddings", {"input": "Hi"}, "embeddings", DEFAULTS["embeddings"]),
        ("/v1/images/generations", {"prompt": "a red square", "size": "64x64"}, "image", DEFAULTS["image"]),
        ("/v1/audio/speech", {"input": "Hi"}, "tts", None),  # None: the slot's default, as Control reads it
        ("/v1/audio/transcriptions", {"file": WAV}, "asr", None),
        ("/v1/vlm/completions", JSON_ROUTES[6][1], "vlm", DEFAULTS["vlm"]),
    ],
)
async def test_keep_alive_reaches_the_control_plane_for_the_model_that_answered(
    tmp_path, route, body, slot, kept_model
):
    http, slots, app = client(KeepAliveControl, tmp_path=tmp_path)
    async with http:
        r = await http.post(route, json={**body, "keep_alive": "1m30s"})
        assert r.status_code == 200, r.text
    assert [k[:3] for k in app.state.ingress.control.kept] == [(slot, kept_model, 90.0)]
    assert len(slots[slot].calls) == 1


async def test_a_streamed_answer_hands_keep_alive_over_while_it_still_runs(tmp_path):
    slots = default_slots()
    slots["llm"] = fakes.FakeClient(chat=fakes.slowly(fakes.generation("one two three"), 0.01))
    http, _, app = client(KeepAliveControl, slots=slots, tmp_path=tmp_path)
    async with http:
        body = {"model": "ominix-tiny-qwen3", "messages": HI, "stream": True, "keep_alive": 0}
        async with http.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            text = "".join([part async for part in r.aiter_text()])
    assert "[DONE]" in text
    assert app.state.ingress.control.kept == [("llm", "ominix-tiny-qwen3", 0.0, True)]


@pytest.mark.parametrize("value, seconds", [(-1, -1.0), ("-1", -1.0), ("0", 0.0), (3, 3.0), ("250ms", 0.25)])
async def test_ollamas_values(tmp_path, value, seconds):
    http, _, app = client(KeepAliveControl, tmp_path=tmp_path)
    async with http:
        r = await http.post("/v1/chat/completions", json={"messages": HI, "keep_alive": value})
        assert r.status_code == 200, r.text
    assert [k[2] for k in app.state.ingress.control.kept] == [seconds]


async def test_no_keep_alive_no_control_call(tmp_path):
    http, _, app = client(KeepAliveControl, tmp_path=tmp_path)
    async with http:
        assert (await http.post("/v1/chat/completions", json={"messages": HI})).status_code == 200
        assert (await http.post("/v1/embeddings", json={"input": "Hi", "keep_alive": None})).status_code == 200
    assert app.state.ingress.control.kept == []


async def test_an_unreachable_control_plane_costs_the_answer_nothing(tmp_path, caplog):
    http, _, _ = client(lambda slots: KeepAliveControl(slots, fail=True), tmp_path=tmp_path)
    async with http:
        r = await http.post("/v1/chat/completions", json={"messages": HI, "keep_alive": "5m"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Hello there"
    assert "keep_alive 300 s for ominix-tiny-qwen3 on slot llm not applied" in caplog.text


async def test_status_shows_each_models_times_and_timeout(tmp_path):
    loaded = {
        "id": "ominix-tiny-qwen3",
        "loaded_at": 1000.0,
        "last_used_at": 1010.0,
        "in_use": 0,
        "idle_unload_s": 3.0,
        "unload_at": 1013.0,
    }

    class TimedControl(FakeControl):
        def _status(self, model=None):
            status = super()._status()
            status["llm"]["desired"]["keep_alive"] = {"ominix-tiny-qwen3": 3.0}
            status["llm"]["replicas"][0]["models"] = [dict(loaded)]
            return status

    http, _, _ = client(lambda slots: TimedControl(DEFAULTS), tmp_path=tmp_path)
    async with http:
        status = (await http.get("/v1/models/status")).json()
    assert status["slots"]["llm"]["keep_alive"] == {"ominix-tiny-qwen3": 3.0}
    assert status["slots"]["asr"]["keep_alive"] == {}
    (row,) = status["slots"]["llm"]["replicas"][0]["models"]
    assert row == loaded
