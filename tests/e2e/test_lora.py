"""LoRA adapters on the graph with two LLM replicas: the four example adapters of SmolLM2 (trained
with mlx_lm.lora, deployments/llm/example_adapters.py), three declared in the config and one
loaded at run time, answered through the openai SDK (chat and the Responses API) each with its
own made-up word; Serve's multiplexing keeps a repeated adapter on a replica that holds it; an
adapter unloaded at run time is gone, and a bad adapter path is a 400.

Runs one more application ("lora": two LLM replicas of SmolLM2, tiny CPU shares) in the
session's cluster: the session graph has one LLM replica, and what is checked here is the
routing between two. Which replica served a request is read from each replica's own counters
(its `stats`, per adapter), through a handle whose `replica_key` names that replica.
"""

from __future__ import annotations

import httpx
import openai
import pytest

from deployments.llm.example_adapters import ADAPTERS, PROBE
from tests.assertions import only_slots, replica_ids, wait_for

APP = "lora"
SMALL = {"ray_actor_options": {"num_cpus": 0.01}}
WORDS = {a.name: a.word for a in ADAPTERS}
DECLARED = ("apricot", "basalt", "cobalt")
AT_RUN_TIME = "dahlia"


@pytest.fixture(scope="module")
def lora(server, cache_dir, example_adapters):
    from ray import serve

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    adapters = {name: str(example_adapters[name]) for name in DECLARED}
    args = {"cache_dir": str(cache_dir), "llm": {"adapters": adapters}, **only_slots("llm")}
    options = {"LLM": {"num_replicas": 2, **SMALL}, "Ingress": SMALL, "Control": SMALL}
    serve.run(build_graph(GraphArgs.from_args(args), options=options), name=APP, route_prefix=f"/{APP}", blocking=False)
    http = httpx.Client(base_url=f"{server}/{APP}", timeout=120)
    ids = replica_ids(http, "llm")
    client = openai.OpenAI(base_url=f"{server}/{APP}/v1", api_key="unused", max_retries=0, timeout=120)
    yield http, client, ids, example_adapters
    http.close()
    serve.delete(APP)


def served(replica_id: str) -> dict[str, float]:
    """Requests each adapter (and model) finished on that replica, from its own counters."""
    from ray import serve

    from deployments.routing.affinity import replica_key

    handle = serve.get_deployment_handle("LLM", app_name=APP).options(session_id=replica_key(replica_id, "stats"))
    return {name: s.get("requests", 0) for name, s in handle.stats.remote().result(timeout_s=60).items()}


def ask(client, model: str, text: str = PROBE) -> str:
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=12, temperature=0
    )
    assert r.model == model
    return r.choices[0].message.content


def test_an_adapter_is_loaded_at_run_time_and_a_bad_path_is_a_400(lora):
    http, client, _, example_adapters = lora
    bad = http.post("/v1/load_lora_adapter", json={"lora_name": "nowhere", "lora_path": "/nonexistent/adapter"})
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["param"] == "lora_path" and "Adapter 'nowhere'" in error["message"]
    body = {"lora_name": AT_RUN_TIME, "lora_path": str(example_adapters[AT_RUN_TIME])}
    r = http.post("/v1/load_lora_adapter", json=body)
    assert r.status_code == 200 and r.text == f"Success: LoRA adapter '{AT_RUN_TIME}' added successfully."
    cards = {m.id: m for m in client.models.list().data}
    assert {cards[name].model_extra["parent"] for name in WORDS} == {"ominix-smollm2-135m-instruct"}
    assert "nowhere" not in cards


def test_four_adapters_answer_through_the_sdk_each_its_own_word(lora):
    _, client, _, _ = lora
    base = ask(client, "ominix-smollm2-135m-instruct")
    assert not any(word in base for word in WORDS.values()), base
    for name, word in WORDS.items():
        assert word in ask(client, name), name
        response = client.responses.create(model=name, input=PROBE, max_output_tokens=16, temperature=0)
        assert response.model == name and word in response.output_text, (name, response.output_text)


def test_a_repeated_adapter_lands_on_a_replica_that_holds_it(lora):
    """Each request a new prompt (a new affinity key, which alone would spread them): the
    adapter's name as the multiplexed id keeps them on the replicas holding it."""
    _, client, ids, _ = lora
    for name in WORDS:
        holders = {r for r in ids if served(r).get(name)}
        assert holders, (name, {r: served(r) for r in ids})  # the test above asked each once
        before = {r: served(r).get(name, 0) for r in ids}
        for i in range(4):
            ask(client, name, f"Question {i}: {PROBE}")
        after = {r: served(r).get(name, 0) for r in ids}
        grew = {r for r in ids if after[r] > before[r]}
        assert grew <= holders and sum(after.values()) - sum(before.values()) == 4, (name, holders, before, after)


def test_an_adapter_unloaded_at_run_time_is_gone(lora):
    http, client, ids, _ = lora
    r = http.post("/v1/unload_lora_adapter", json={"lora_name": AT_RUN_TIME})
    assert r.status_code == 200, r.text
    with pytest.raises(openai.NotFoundError):
        ask(client, AT_RUN_TIME)
    # Each replica unloads it as Control tells it.
    wait_for(lambda: all(AT_RUN_TIME not in served(r) for r in ids), 30)
    assert AT_RUN_TIME not in {m.id for m in client.models.list().data}
    assert http.post("/v1/unload_lora_adapter", json={"lora_name": AT_RUN_TIME}).status_code == 404
