"""LoRA adapters at the ingress, in process: vLLM's load and unload routes over the real control
state (deployments/control/state.py), an adapter's name routed as the multiplexed model id on
every LLM route, and listed in /v1/models with its base as parent. What the replicas do with it
is tested in tests/unit/llm (the engine) and end to end in tests/e2e/test_lora.py."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from deployments.control.state import ControlState
from deployments.ingress.app import create_app
from deployments.protocol.errors import invalid_request
from deployments.routing.affinity import llm_affinity_key
from graphs.config import GraphArgs
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

BASE = "ominix-smollm2-135m-instruct"
TINY = "ominix-tiny-qwen3"


class AdapterControl(fakes.FakeClient):
    """Control's adapter calls (desired, set_adapter, status) over the real ControlState."""

    def __init__(self):
        self.state = ControlState({"llm": BASE})
        super().__init__(
            desired=lambda slot, model=None: self.state.desired[slot],
            set_adapter=lambda slot, name, spec, model=None: self.state.set_adapter(slot, name, spec),
            status=lambda model=None: {
                s: {"desired": d.model_dump(), "replicas": []} for s, d in self.state.desired.items()
            },
        )


def check_adapter(name, path, base, model=None):
    """The LLM replica's check: a path that is no adapter is its 400 naming the adapter."""
    if "missing" in path:
        raise invalid_request(f"Adapter '{name}': '{path}' is neither a local directory nor ...", "lora_path")
    return {"name": name, "base": base, "kind": "lora", "rank": 4, "modules": 8}


def make_app(control, **args):
    slots = default_slots()
    slots["llm"].answers["check_adapter"] = check_adapter
    slots["llm"].answers["count_tokens"] = lambda request, model=None: 7
    config = GraphArgs.from_args(shipped_args(**args), environ={})
    return create_app(ingress_state(config, slots, control=control)), slots["llm"]


def client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.fixture
def control():
    return AdapterControl()


async def test_an_adapter_loaded_at_run_time_is_a_model_of_every_llm_route(tmp_path, control):
    app, llm = make_app(control, cache_dir=str(tmp_path))
    async with client(app) as http:
        r = await http.post("/v1/load_lora_adapter", json={"lora_name": "pirate", "lora_path": "/adapters/pirate"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert r.text == "Success: LoRA adapter 'pirate' added successfully."
        # Checked on a replica holding the base (the slot's default now), then kept by Control.
        assert ("check_adapter", ("pirate", "/adapters/pirate", BASE), BASE) in llm.calls
        assert control.state.desired["llm"].adapters == {"pirate": {"path": "/adapters/pirate", "base": BASE}}

        cards = {c["id"]: c for c in (await http.get("/v1/models")).json()["data"]}
        assert cards["pirate"]["parent"] == BASE and cards["pirate"]["type"] == "llm"
        assert cards[BASE]["parent"] is None
        assert (await http.get("/v1/models/pirate")).json()["parent"] == BASE

        messages = [{"role": "user", "content": "Hi"}]
        chat = await http.post("/v1/chat/completions", json={"model": "pirate", "messages": messages})
        assert chat.status_code == 200 and chat.json()["model"] == "pirate"
        done = await http.post("/v1/completions", json={"model": "pirate", "prompt": "Hi"})
        assert done.status_code == 200
        responses = await http.post("/v1/responses", json={"model": "pirate", "input": "Hi"})
        assert responses.status_code == 200 and responses.json()["model"] == "pirate"
        anthropic = await http.post("/v1/messages", json={"model": "pirate", "max_tokens": 8, "messages": messages})
        assert anthropic.status_code == 200
        counted = await http.post("/v1/messages/count_tokens", json={"model": "pirate", "messages": messages})
        assert counted.json() == {"input_tokens": 7}
    # The adapter's name is each call's multiplexed model id: Serve routes it to replicas holding it.
    generating = [
        (method, model) for method, _, model in llm.calls if method in ("chat", "completions", "count_tokens")
    ]
    assert generating == [
        ("chat", "pirate"),
        ("completions", "pirate"),
        ("chat", "pirate"),
        ("chat", "pirate"),
        ("count_tokens", "pirate"),
    ]


async def test_refusals_follow_vllm_in_the_routes_error_shape(tmp_path, control):
    app, llm = make_app(control, cache_dir=str(tmp_path))
    async with client(app) as http:
        ok = await http.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/adapters/a"})
        assert ok.status_code == 200
        cases = [
            ({"lora_name": "a", "lora_path": "/adapters/b"}, 400, "lora_name", "already been loaded"),
            ({"lora_name": BASE, "lora_path": "/adapters/b"}, 400, "lora_name", "a model's or an alias"),
            ({"lora_name": "qwen3", "lora_path": "/adapters/b"}, 400, "lora_name", "a model's or an alias"),
            ({"lora_name": "b", "lora_path": "/adapters/missing"}, 400, "lora_path", "Adapter 'b'"),
            ({"lora_name": "b", "lora_path": "/x", "base_model_name": "nope"}, 400, "base_model_name", "nope"),
            ({"lora_name": "b"}, 400, "lora_path", "Field required"),
            ({"lora_name": "", "lora_path": "/x"}, 400, "lora_name", ""),
            ({"lora_name": "b", "lora_path": "/x", "load_inplace": True}, 400, "load_inplace", ""),
        ]
        for body, status, param, words in cases:
            r = await http.post("/v1/load_lora_adapter", json=body)
            error = r.json()["error"]
            assert (r.status_code, error["param"]) == (status, param), (body, r.text)
            assert words in error["message"], (body, error)
        gone = await http.post("/v1/unload_lora_adapter", json={"lora_name": "never"})
        assert (
            gone.status_code == 404 and gone.json()["error"]["message"] == "The lora adapter 'never' cannot be found."
        )
    # Nothing refused reached Control, and a bad base never reached a replica.
    assert control.state.desired["llm"].adapters == {"a": {"path": "/adapters/a", "base": BASE}}
    assert [args[1] for method, args, _ in llm.calls if method == "check_adapter"] == [
        "/adapters/a",
        "/adapters/missing",
    ]


async def test_an_adapter_on_another_allowed_base_and_unloaded_again(tmp_path, control):
    app, llm = make_app(control, cache_dir=str(tmp_path))
    async with client(app) as http:
        body = {"lora_name": "tiny-style", "lora_path": "me/tiny-style", "base_model_name": TINY}
        assert (await http.post("/v1/load_lora_adapter", json=body)).status_code == 200
        assert llm.calls[-1] == ("check_adapter", ("tiny-style", "me/tiny-style", TINY), TINY)
        r = await http.post("/v1/unload_lora_adapter", json={"lora_name": "tiny-style"})
        assert r.status_code == 200 and r.text == "Success: LoRA adapter 'tiny-style' removed successfully."
        chat = await http.post(
            "/v1/chat/completions", json={"model": "tiny-style", "messages": [{"role": "user", "content": "Hi"}]}
        )
        assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"
        assert "tiny-style" not in {c["id"] for c in (await http.get("/v1/models")).json()["data"]}


async def test_another_ingress_replica_finds_an_adapter_it_did_not_load(tmp_path, control):
    """Two ingress replicas share Control: the second learns of the adapter on its first
    request naming it (and /v1/models lists it), without being told."""
    first, _ = make_app(control, cache_dir=str(tmp_path))
    second, llm = make_app(control, cache_dir=str(tmp_path))
    async with client(first) as a, client(second) as b:
        messages = [{"role": "user", "content": "Hi"}]
        assert (await b.post("/v1/chat/completions", json={"model": "late", "messages": messages})).status_code == 404
        assert (await a.post("/v1/load_lora_adapter", json={"lora_name": "late", "lora_path": "/x"})).status_code == 200
        chat = await b.post("/v1/chat/completions", json={"model": "late", "messages": messages})
        assert chat.status_code == 200 and llm.calls[-1][2] == "late"


async def test_unknown_names_at_once_share_one_read_of_controls_list(tmp_path, control):
    """Each unknown `model` makes the ingress read Control's adapters (another ingress may have
    loaded it), but misses that arrive together wait for one read: a flood of bad names is not
    a flood of calls to Control."""
    state = control.state

    async def slow_desired(slot, model=None):
        await asyncio.sleep(0.05)
        return state.desired[slot]

    control.answers["desired"] = slow_desired
    app, _ = make_app(control, cache_dir=str(tmp_path))
    body = {"messages": [{"role": "user", "content": "Hi"}]}
    async with client(app) as http:
        answers = await asyncio.gather(
            *[http.post("/v1/chat/completions", json={**body, "model": f"nobody-{i}"}) for i in range(8)]
        )
    assert {r.status_code for r in answers} == {404}
    assert 1 <= sum(1 for call in control.calls if call[0] == "desired") <= 2


async def test_configured_adapters_are_listed_and_stay(tmp_path, control):
    app, _ = make_app(
        control,
        cache_dir=str(tmp_path),
        llm={"adapters": {"house": "/adapters/house", "tiny": {"path": "/t", "base": TINY}}},
    )
    async with client(app) as http:
        cards = {c["id"]: c for c in (await http.get("/v1/models")).json()["data"]}
        assert cards["house"]["parent"] == BASE and cards["tiny"]["parent"] == TINY
        r = await http.post("/v1/unload_lora_adapter", json={"lora_name": "house"})
        assert r.status_code == 400 and "declared in the config" in r.json()["error"]["message"]


def test_a_realtime_session_talks_to_an_adapter(tmp_path, control, host):
    """The Realtime conversation's LLM (`?model=`, session.update) may be an adapter too."""
    from tests.ingress.fakes import streaming_asr
    from tests.ingress.test_realtime_conversation import URL, ask, connect

    app, llm = make_app(control, cache_dir=str(tmp_path), llm={"adapters": {"house": "/adapters/house"}})
    app.state.ingress.slots["asr"] = streaming_asr(host)
    with connect(app, URL + "?model=house") as ws:
        assert ws.receive_json()["session"]["model"] == "house"
        ws.send_json({"type": "session.update", "session": {"output_modalities": ["text"]}})
        ws.receive_json()
        assert ask(ws)[-1]["response"]["status"] == "completed"
    assert llm.calls[-1][0] == "chat" and llm.calls[-1][2] == "house"


def test_a_configured_adapter_may_not_take_a_models_name_or_an_unknown_base(tmp_path):
    with pytest.raises(ValueError, match="'ominix-tiny-qwen3' is a model id or alias"):
        GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path), llm={"adapters": {TINY: "/x"}}), environ={})
    with pytest.raises(ValueError, match="base: 'elsewhere' is not an allowed model"):
        GraphArgs.from_args(
            shipped_args(cache_dir=str(tmp_path), llm={"adapters": {"a": {"path": "/x", "base": "elsewhere"}}}),
            environ={},
        )


def test_the_prefix_key_is_per_adapter():
    """Adapters cache their prompts apart: the same conversation on two adapters is two keys."""
    from deployments.protocol.openai import ChatCompletionRequest

    messages = [{"role": "user", "content": "Hi"}]
    keys = {llm_affinity_key(ChatCompletionRequest(model=m, messages=messages)) for m in ("a", "b", None)}
    assert len(keys) == 3
