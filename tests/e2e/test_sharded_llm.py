"""One model across several machines: the LLM slot sharded over a gang of ranks, each on a node of
its own, as docs/multi-node.md sets it up: a head and three worker nodes (each its own `ray start`
process, labelled `llm`), and `serve run` of serve_config.yaml with only the LLM slot on and
`tensor_parallel_size: 3` (SmolLM2-135M: 9 attention heads, 3 KV heads), one rank per worker node.
A second application on the same cluster serves a tiny random Ministral 3 with
`pipeline_parallel_size: 2`.

Checked: each rank on a node of its own; greedy answers (chat, a JSON schema, a tool call) token
for token the whole model's (computed here, in process); 16 concurrent streams all answered; a
rank of the pipeline gang killed mid-stream ends the stream with a clean error, Serve replaces
the whole gang, and the next request is answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

from tests.assertions import only_slots, wait_for
from tests.e2e.test_multinode import BIN, ROLE, ROOT, Cluster, cli_env, free_port, start_graph, stop_graph
from tests.gang_requests import answer
from tests.tiny_pipeline_model import ensure_tiny_pipeline_model
from tests.unit.llm.test_gang import SCHEMA, WEATHER

pytestmark = pytest.mark.slow

SMOLLM2 = "ominix-smollm2-135m-instruct"
NO_THINKING = {"enable_thinking": False}
# Short answers: on one 2-core machine each step of a 30-layer model over 3 ranks is 60 ring
# collectives on loopback (docs/multi-node.md says what that measures and what it does not).
REQUESTS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 10},
    {
        "messages": [{"role": "user", "content": "Give me a JSON object."}],
        "max_tokens": 20,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    },
    {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "max_tokens": 24,
        "tools": [WEATHER],
        "tool_choice": "required",
    },
]


def application(name: str, prefix: str, cache_dir, llm: dict) -> dict:
    """serve_config.yaml's application with only the LLM slot on, the LLM sharded by `llm`."""
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    app = config["applications"][0]
    app["name"], app["route_prefix"] = name, prefix
    app["args"]["cache_dir"] = str(cache_dir)
    app["args"].update(only_slots("llm"))
    app["args"]["llm"].update(llm, models=[], disk_cache_bytes=0, rank_label_selector={ROLE: "llm"})
    head = {"label_selector": {ROLE: "head"}}
    kept = []
    for d in app["deployments"]:
        if d["name"] in ("Ingress", "Control"):
            kept.append({**d, "ray_actor_options": {**d["ray_actor_options"], **head}})
        elif d["name"] == "LLM":  # placed by its gang's bundles (llm.rank_label_selector)
            kept.append({**d, "autoscaling_config": {"min_replicas": 1, "max_replicas": 1}})
    app["deployments"] = kept
    return app


@pytest.fixture(scope="module")
def gang_cluster(tmp_path_factory, cache_dir):
    work = tmp_path_factory.mktemp("sharded")
    cluster = Cluster(work)
    serve_proc = None
    try:
        cluster.start("head", "head", head=True)
        wait_for(lambda: len(cluster.alive_nodes()) == 1, 240)
        for i in range(3):
            cluster.join(f"llm{i}", "llm")
        pipeline_dir = ensure_tiny_pipeline_model(cache_dir)
        config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
        port = free_port()
        config["http_options"]["port"] = port
        config["applications"] = [
            application("ominix", "/", cache_dir, {"default_model": SMOLLM2, "tensor_parallel_size": 3}),
            application(
                "pipeline",
                "/pp",
                cache_dir,
                {"default_model": str(pipeline_dir), "pipeline_parallel_size": 2, "placement_strategy": "SPREAD"},
            ),
        ]
        path = work / "serve_config.yaml"
        path.write_text(yaml.safe_dump(config))
        serve_proc = start_graph(cluster, path)
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        wait_for(lambda: ready(http, serve_proc, work, "") and ready(http, serve_proc, work, "/pp"), 420)
        yield cluster, http, pipeline_dir
    finally:
        stop_graph(serve_proc)
        cluster.stop_all()


def ready(http: httpx.Client, serve_proc, work: Path, prefix: str) -> bool:
    assert serve_proc.poll() is None, (work / "serve.log").read_text()[-4000:]
    try:
        r = http.get(f"{prefix}/readyz")
    except httpx.HTTPError:
        return False
    return r.status_code == 200


def replica(http: httpx.Client, prefix: str = "") -> dict:
    (only,) = http.get(f"{prefix}/v1/models/status").json()["slots"]["llm"]["replicas"]
    return only


async def whole(model_dir: Path, requests: list[dict]) -> list:
    from deployments.llm.engine import EngineConfig, LLMEngine

    engine = await LLMEngine.start("whole", model_dir, EngineConfig(prefix_cache_entries=0))
    try:
        return await asyncio.gather(*(answer(engine, {**r, "temperature": 0}) for r in requests))
    finally:
        engine.shutdown()


def served(http: httpx.Client, prefix: str, requests: list[dict]) -> list:
    """The requests at once (the gang batches them), answered as a client reads them."""

    async def one(client, body):
        r = await client.post(f"{prefix}/v1/chat/completions", json={**body, "temperature": 0})
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
        return message.get("content") or "", calls

    async def all_of_them():
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=600) as client:
            return await asyncio.gather(*(one(client, body) for body in requests))

    return asyncio.run(all_of_them())


def test_each_rank_has_a_node_of_its_own(gang_cluster):
    _, http, _ = gang_cluster
    ranks = replica(http)["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2]
    assert len({r["node_id"] for r in ranks}) == 3
    nodes = {n["node_id"]: n for n in gang_cluster[0].alive_nodes()}
    assert {nodes[r["node_id"]]["labels"][ROLE] for r in ranks} == {"llm"}


def test_greedy_answers_are_the_whole_models_token_for_token(gang_cluster, cache_dir):
    from deployments.llm.smollm2 import ensure_smollm2

    _, http, pipeline_dir = gang_cluster
    for prefix, model_dir in (("", ensure_smollm2(cache_dir)), ("/pp", pipeline_dir)):
        expected = asyncio.run(whole(model_dir, REQUESTS))
        got = served(http, prefix, REQUESTS)
        assert got == [(a[0]["content"], [tuple(c) for c in a[0]["calls"]]) for a in expected], prefix
        if not prefix:
            assert "Paris" in got[0][0] and got[2][1][0][0] == "get_weather"  # SmolLM2 means it


def test_16_concurrent_streams_are_all_answered(gang_cluster):
    _, http, _ = gang_cluster

    async def stream(client, i):
        body = {
            "messages": [{"role": "user", "content": f"Count to {i}."}],
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        finish, usage = None, None
        async with client.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    assert "error" not in chunk, chunk
                    finish = (chunk["choices"] or [{}])[0].get("finish_reason") or finish
                    usage = chunk.get("usage") or usage
        return finish, usage

    async def all_streams():
        async with httpx.AsyncClient(base_url=str(http.base_url), timeout=600) as client:
            return await asyncio.gather(*(stream(client, i) for i in range(16)))

    results = asyncio.run(all_streams())
    assert all(finish in ("stop", "length") and usage["completion_tokens"] >= 1 for finish, usage in results)


def rank_pid(cluster: Cluster, app: str, rank: int) -> int:
    out = subprocess.run(
        [str(BIN / "ray"), "list", "actors", "--format=json", "--filter", "state=ALIVE", "--detail"]
        + [f"--address=http://127.0.0.1:{cluster.dashboard_port}"],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    names = {a.get("name") or "": a["pid"] for a in json.loads(out.stdout)}
    (pid,) = [pid for name, pid in names.items() if f"::{app}#LLM#" in name and name.endswith(f":rank-{rank}")]
    return pid


def test_a_rank_killed_mid_stream_ends_it_cleanly_and_the_gang_is_replaced(gang_cluster):
    """On the pipeline gang (its tiny model restarts in seconds; the same code path as the
    tensor-parallel gang's)."""
    cluster, http, _ = gang_cluster
    before = replica(http, "/pp")["replica_id"]
    pid = rank_pid(cluster, "pipeline", 1)
    body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 2000, "stream": True}
    body["ignore_eos"] = True
    events = []
    with http.stream("POST", "/pp/v1/chat/completions", json=body, timeout=300) as r:
        lines = (line for line in r.iter_lines() if line.startswith("data: {"))
        events.append(json.loads(next(lines)[6:]))
        os.kill(pid, signal.SIGKILL)  # one machine's rank goes away
        events += [json.loads(line[6:]) for line in lines]
    assert "error" in events[-1], events[-1]
    assert events[-1]["error"]["type"] == "service_unavailable", events[-1]
    wait_for(lambda: replica_changed(http, "/pp", before), 300)
    assert len({r["node_id"] for r in replica(http, "/pp")["ranks"]}) == 2
    r = http.post("/pp/v1/chat/completions", json={**REQUESTS[0], "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]


def replica_changed(http: httpx.Client, prefix: str, before: str) -> bool:
    try:
        now = replica(http, prefix)
    except (httpx.HTTPError, ValueError, KeyError):
        return False
    return now["replica_id"] != before and now.get("ranks") is not None and now.get("serve_state") in (None, "RUNNING")
