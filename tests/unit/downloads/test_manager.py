"""Downloads against a fake hub on a loopback socket (tests/fake_hub.py): progress events,
cancellation long before the download would end, a repo the hub lacks, no network; never partial files."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from deployments.downloads.manager import DownloadManager
from tests.assertions import wait_for
from tests.fake_hub import TINY_FILES as FILES
from tests.fake_hub import TINY_REPO as REPO
from tests.loopback import free_port


@pytest.fixture
def manager(hub, tmp_path):
    return DownloadManager(cache_dir=tmp_path / "hub", endpoint=hub.url)


def _finished(manager, model_id=REPO, timeout_s=30):
    return wait_for(lambda: (e := manager.events(model_id)[0])["is_complete"] and e, timeout_s, 0.05)


def test_a_download_lands_in_the_hub_cache_with_its_progress(manager, tmp_path):
    from huggingface_hub import try_to_load_from_cache

    task = manager.start(REPO)
    assert task.task_id.startswith("dl-") and len(task.task_id) == 35
    event = _finished(manager)
    assert event["state"] == "ready" and event["message"] == f"Model {REPO} downloaded successfully"
    assert event["downloaded_bytes"] == event["total_bytes"] == sum(map(len, FILES.values()))
    assert event["progress"] == 1.0 and event["total_files"] == 2 and event["current_file_index"] == 2
    path = try_to_load_from_cache(REPO, "model.safetensors", cache_dir=tmp_path / "hub")
    assert open(path, "rb").read() == FILES["model.safetensors"]


def test_progress_streams_and_cancel_stops_long_before_the_end_leaving_nothing(manager, hub, tmp_path):
    hub.bytes_per_s = 500_000  # the weights take 12 s, in 256 KiB reads: a cancel that waits for them is seen
    manager.start(REPO)

    async def watch_until_bytes_then_cancel():
        seen = []
        async for event in manager.watch(REPO, poll_s=0.05):
            seen.append(event)
            if (
                event["state"] == "downloading"
                and event["downloaded_bytes"] > 0
                and not manager.tasks[REPO].cancel.is_set()
            ):
                asked = time.monotonic()
                assert manager.cancel(REPO)
        return seen, asked

    seen, asked = asyncio.run(watch_until_bytes_then_cancel())
    assert [e["state"] for e in seen][0] in ("queued", "listing")
    assert seen[-1]["state"] == "cancelled" and seen[-1]["is_complete"] and seen[-1]["message"] == "Download cancelled"
    assert any(e["speed_bytes_per_sec"] > 0 and e["current_file"] for e in seen)
    assert time.monotonic() - asked < 5
    assert not (tmp_path / "hub" / "models--acme--tiny-model").exists()
    assert not manager.cancel(REPO)  # nothing active any more


def test_a_late_watcher_gets_the_current_state_first(manager):
    manager.start(REPO)
    _finished(manager)

    async def first():
        return [e async for e in manager.watch(REPO)]

    events = asyncio.run(first())
    assert len(events) == 1 and events[0]["state"] == "ready"


def test_a_repo_the_hub_lacks_is_an_error_event(manager, tmp_path):
    manager.start("acme/missing")
    event = _finished(manager, "acme/missing")
    assert event["state"] == "error" and "RepositoryNotFoundError" in event["error"]
    assert not (tmp_path / "hub" / "models--acme--missing").exists()


def test_without_network_a_download_fails_at_once_leaving_no_files(tmp_path):
    manager = DownloadManager(cache_dir=tmp_path / "hub", endpoint=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    manager.start(REPO)
    event = _finished(manager)
    assert time.monotonic() - started < 10
    assert event["state"] == "error" and "Connect" in event["error"], event
    assert not any((tmp_path / "hub").rglob("*")) if (tmp_path / "hub").exists() else True


def test_a_failure_mid_file_removes_the_partial_blob_of_a_repo_already_cached(manager, hub, tmp_path):
    manager.start(REPO)
    _finished(manager)
    hub.repos[REPO] = {**FILES, "extra.safetensors": os.urandom(400_000)}
    hub.bytes_per_s = 100_000
    manager.start(REPO)
    wait_for(lambda: manager.events(REPO)[0]["current_file"] == "extra.safetensors", 20, 0.05)
    time.sleep(0.5)
    manager.cancel(REPO)
    assert _finished(manager)["state"] == "cancelled"
    blobs = tmp_path / "hub" / "models--acme--tiny-model" / "blobs"
    assert blobs.exists() and not list(blobs.glob("*.incomplete"))


def test_a_stalled_download_sends_keep_alives(manager, hub):
    hub.bytes_per_s = 20_000  # minutes for the weights
    manager.start(REPO)

    async def first_events():
        seen = []
        async for event in manager.watch(REPO, poll_s=0.01, keepalive_s=0.1):
            seen.append(event)
            if None in seen:
                return seen

    seen = asyncio.run(first_events())
    assert seen[0]["model_id"] == REPO and seen[-1] is None
    manager.cancel(REPO)
    assert _finished(manager)["state"] == "cancelled"
