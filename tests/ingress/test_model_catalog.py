"""OminiX-API's catalog and download routes in process, against a fake hub on a loopback
socket (tests/fake_hub.py): the catalog, every refusal, SSE progress, cancel, remove, scan."""

from __future__ import annotations

import json
import time

import httpx

from deployments.downloads.manager import DownloadManager
from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.fake_hub import TINY_FILES as FILES
from tests.fake_hub import TINY_REPO as REPO
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.loopback import free_port


def _client(tmp_path, endpoint: str, **llm) -> httpx.AsyncClient:
    llm = {**shipped_args()["llm"], "models": ["ominix-tiny-qwen3", REPO], **llm}
    state = ingress_state(GraphArgs.from_args(shipped_args(llm=llm), environ={}), default_slots())
    state.downloads = DownloadManager(cache_dir=tmp_path / "hub", endpoint=endpoint)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(state)), base_url="http://t", timeout=30)


async def _events(http, query: str = "") -> list[dict]:
    r = await http.get(f"/v1/models/download/progress{query}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


async def test_catalog_lists_builtins_allowed_and_recommended_models(hub, tmp_path):
    async with _client(tmp_path, hub.url) as http:
        body = (await http.get("/v1/models/catalog")).json()
    entries = {e["id"]: e for e in body["models"]}
    assert body["total"] == len(entries)
    assert entries["ominix-tiny-qwen3"]["status"] == "builtin" and entries["whisper-tiny.en"]["slot"] == "asr"
    assert entries[REPO]["status"] == "not_downloaded" and entries[REPO]["source"]["repo_id"] == REPO
    assert entries["mlx-community/Qwen3-8B-8bit"]["runtime"]["memory_required_mb"] == 8192
    assert entries["black-forest-labs/FLUX.2-klein-4B"]["category"] == "Image"


async def test_download_progress_and_the_catalog_after_it(hub, tmp_path):
    async with _client(tmp_path, hub.url) as http:
        r = await http.post("/v1/models/download", json={"model_id": REPO})
        assert r.status_code == 200 and r.json()["status"] == "accepted" and r.json()["task_id"].startswith("dl-")
        events = await _events(http, f"?model_id={REPO}")
        assert events[-1]["state"] == "ready" and events[-1]["is_complete"] and events[-1]["progress"] == 1.0
        assert events[-1]["total_bytes"] == sum(map(len, FILES.values()))
        entry = next(e for e in (await http.get("/v1/models/catalog")).json()["models"] if e["id"] == REPO)
        assert entry["status"] == "ready" and entry["storage"]["total_size_bytes"] >= 3_000_000
        assert_openai_error(
            await http.post("/v1/models/download", json={"model_id": REPO}), 409, code="already_downloaded"
        )
        scan = (await http.post("/v1/models/scan")).json()
        assert scan["status"] == "success" and scan["models"] == [REPO]
        # a late client gets the final state at once, and the stream ends
        assert [e["state"] for e in await _events(http)] == ["ready"]


async def test_refusals(hub, tmp_path):
    async with _client(tmp_path, hub.url) as http:
        r = await http.post("/v1/models/download", json={"model_id": "someone/else"})
        assert_openai_error(r, 403, param="model_id", code="model_not_allowed")
        r = await http.post("/v1/models/download", json={"model_id": "ominix-tiny-qwen3"})
        assert_openai_error(r, 409, code="builtin_model")
        assert_openai_error(await http.post("/v1/models/download", json={}), 400, param="model_id")
        assert_openai_error(await http.post("/v1/models/download/cancel", json={"model_id": REPO}), 404)
        assert_openai_error(await http.post("/v1/models/remove", json={"model_id": REPO}), 404, code="model_not_found")
        assert_openai_error(await http.post("/v1/models/remove", json={"model_id": "someone/else"}), 403)
    assert not hub.requests  # none of them reached the hub


async def test_a_second_download_and_cancel(hub, tmp_path):
    hub.bytes_per_s = 1_000_000
    async with _client(tmp_path, hub.url) as http:
        await http.post("/v1/models/download", json={"model_id": REPO})
        r = await http.post("/v1/models/download", json={"model_id": REPO})
        assert_openai_error(r, 409, code="download_in_progress")
        assert_openai_error(await http.post("/v1/models/remove", json={"model_id": REPO}), 409)
        r = await http.post("/v1/models/download/cancel", json={"model_id": REPO})
        assert r.status_code == 200 and r.json()["status"] == "success"
        events = await _events(http, f"?model_id={REPO}")
        assert events[-1]["state"] == "cancelled"
    assert not (tmp_path / "hub" / "models--acme--tiny-model").exists()


async def test_remove_deletes_a_model_no_slot_serves_and_refuses_a_served_one(hub, tmp_path):
    async with _client(tmp_path, hub.url) as http:
        await http.post("/v1/models/download", json={"model_id": REPO})
        await _events(http, f"?model_id={REPO}")
        r = await http.post("/v1/models/remove", json={"model_id": REPO})
        assert r.status_code == 200 and "Removed model" in r.json()["message"]
        assert not (tmp_path / "hub" / "models--acme--tiny-model").exists()
        await http.post("/v1/models/download", json={"model_id": REPO})
        await _events(http, f"?model_id={REPO}")
    async with _client(tmp_path, hub.url, default_model=REPO) as http:  # the LLM slot's default now
        r = await http.post("/v1/models/remove", json={"model_id": REPO})
        assert_openai_error(r, 409, code="model_in_use")
    assert (tmp_path / "hub" / "models--acme--tiny-model").exists()


async def test_without_network_the_download_fails_promptly_and_leaves_nothing(tmp_path):
    async with _client(tmp_path, f"http://127.0.0.1:{free_port()}") as http:  # nothing listens there
        started = time.monotonic()
        r = await http.post("/v1/models/download", json={"model_id": REPO})
        assert r.status_code == 200
        events = await _events(http, f"?model_id={REPO}")
        assert time.monotonic() - started < 10
    assert events[-1]["state"] == "error" and events[-1]["message"].startswith("Download failed: ")
    assert not (tmp_path / "hub" / "models--acme--tiny-model").exists()
