"""Model management on a slot with two replicas: load, unload, status, readiness, new replicas.

Runs a second application ("managed", two LLM replicas) in the session's cluster. Its second
model is a copy of the tiny model in a configured models directory, loaded by path.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import httpx
import pytest

from tests.assertions import only_slots, wait_for

TINY = "ominix-tiny-qwen3"


@pytest.fixture(scope="module")
def managed(server, cache_dir, tiny_llm_dir, tmp_path_factory):
    from ray import serve

    from graphs.config import GraphArgs
    from graphs.omni import build_graph

    models_dir = tmp_path_factory.mktemp("models")
    second = models_dir / "tiny-b"
    shutil.copytree(tiny_llm_dir, second)
    args = {
        "cache_dir": str(cache_dir),
        "llm": {"default_model": TINY, "models_dir": str(models_dir)},
        **only_slots("llm"),
    }
    serve.run(
        build_graph(GraphArgs.from_args(args), options={"LLM": {"num_replicas": 2}}),
        name="managed",
        route_prefix="/managed",
        blocking=False,
    )
    client = httpx.Client(base_url=f"{server}/managed", timeout=120)

    def two_replicas_ready():
        r = client.get("/v1/models/status")
        return r.status_code == 200 and len(r.json()["slots"]["llm"]["replicas"]) == 2

    wait_for(two_replicas_ready, 180)
    yield client, str(second)
    client.close()
    serve.delete("managed")


def chat(client, **kw):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kw}
    return client.post("/v1/chat/completions", json=body)


def replicas(client):
    return client.get("/v1/models/status").json()["slots"]["llm"]["replicas"]


def test_ready_with_the_configured_default_on_both_replicas(managed):
    client, _ = managed
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["sglang_cuda"] == {"configured": False}
    llm = ready["slots"]["llm"]
    assert {k: llm[k] for k in ("ready", "model", "replicas")} == {"ready": True, "model": TINY, "replicas": 2}
    assert llm["blas"] == ["openblas"] and llm["warnings"] == []  # both replicas on the fast BLAS
    assert [r["default_model"] for r in replicas(client)] == [TINY, TINY]
    assert all(r["memory"]["mlx_active_bytes"] > 0 for r in replicas(client))


def test_every_replica_says_which_blas_it_multiplies_with(managed):
    from deployments import blas

    client, _ = managed
    reports = [r["blas"] for r in replicas(client)]
    if sys.platform.startswith("linux") and blas.candidates():
        # The system OpenBLAS is bound in the replica process itself, not only in this one.
        assert all(b["library"] in blas.candidates() and b["threads"] >= 1 for b in reports), reports
    else:
        assert all(b["library"] == blas.REFERENCE for b in reports), reports


def test_load_switches_every_replica_and_requests_keep_being_served(managed):
    client, second = managed

    async def traffic():
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=120) as c:
            results = []
            for _ in range(10):
                results.append(
                    await c.post(
                        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
                    )
                )
            return results

    async def load_during_traffic():
        async with httpx.AsyncClient(base_url=str(client.base_url), timeout=300) as c:
            load = asyncio.create_task(c.post("/v1/models/load", json={"model": second, "model_type": "llm"}))
            during = await traffic()
            return await load, during

    load, during = asyncio.run(load_during_traffic())
    assert load.status_code == 200, load.text
    assert {r["default_model"] for r in load.json()["replicas"]} == {second}
    assert len(load.json()["replicas"]) == 2
    assert all(r.status_code == 200 for r in during), [r.text for r in during if r.status_code != 200]
    r = chat(client)
    assert r.status_code == 200 and r.json()["model"] == second
    models = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert models[second]["loaded"] is True


def test_a_replacement_replica_comes_up_with_the_current_default(managed):
    import ray

    client, second = managed
    before = {r["replica_id"] for r in replicas(client)}
    victim = next(
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["name"].startswith("SERVE_REPLICA::managed#LLM#")
    )
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)

    def replaced():
        # A replacement reports while it loads (default_model None, `loading` set): wait for it.
        now = replicas(client)
        done = len(now) == 2 and {r["replica_id"] for r in now} != before and not any(r["loading"] for r in now)
        return done and now

    now = wait_for(replaced, 180)
    assert [r["default_model"] for r in now] == [second, second]


def test_unload_frees_memory_on_every_replica_then_load_restores(managed):
    client, _ = managed
    r = client.post("/v1/models/unload", json={"model_type": "llm"})
    assert r.status_code == 200, r.text
    freed = r.json()["unloaded"]["llm"]
    assert len(freed) == 2 and all(f["freed_bytes"] > 0 for f in freed)
    assert all(rep["loaded_models"] == [] for rep in replicas(client))
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["slots"]["llm"]["ready"] is False
    unavailable = chat(client)
    assert unavailable.status_code == 503 and "/v1/models/load" in unavailable.json()["error"]["message"]
    assert client.post("/v1/models/load", json={"model": TINY}).status_code == 200
    assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize(
    "body, status",
    [
        ({"model": "acme/not-allowed"}, 403),
        ({"model": "../../etc"}, 400),
        ({"model": "/etc"}, 400),
        ({"model": TINY, "model_type": "video"}, 400),
        ({"model_type": "llm"}, 400),
    ],
)
def test_load_refusals(managed, body, status):
    client, _ = managed
    r = client.post("/v1/models/load", json=body)
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"]


def test_failed_load_keeps_the_previous_model(managed):
    client, _ = managed
    report = client.get("/v1/models/report").json()
    roots = {e["path"].rsplit("/", 1)[0] for e in report["by_slot"].get("llm", []) if e["source"] == "models_dir"}
    assert len(roots) == 1, report
    # A directory inside models_dir that is not a model: allowed by policy, fails to load.
    broken = Path(roots.pop()) / "broken-model"
    broken.mkdir(exist_ok=True)
    (broken / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    status_before = replicas(client)
    r = client.post("/v1/models/load", json={"model": broken.name})
    assert r.status_code == 500 and "keeps serving" in r.json()["error"]["message"]
    assert [rep["default_model"] for rep in replicas(client)] == [s["default_model"] for s in status_before]
    assert chat(client).status_code == 200


def test_version_lists_engines_and_loaded_models(managed):
    client, _ = managed
    v = client.get("/v1/version").json()
    assert v["capabilities"]["mlx-lm"]["category"] == "llm"
    assert {"model": TINY, "model_type": "llm"} in v["models_loaded"]
    assert client.get("/version").json()["ominix_serve"] == v["ominix_serve"]
