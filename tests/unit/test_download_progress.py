"""Download progress: the tqdm class records bytes and files per model, and a slot agent
reports it to the control plane while a load runs (so /v1/models/status shows it)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

from deployments import download_progress
from deployments.control import agent as agent_module
from deployments.control.agent import SlotAgent
from deployments.download_progress import active_downloads, describe, finished, progress_class


def bars(model_id):
    cls = progress_class(model_id)
    # The shapes huggingface_hub's snapshot_download creates (bytes bar, a second bytes bar, files bar).
    transfer = cls(desc="Downloading bytes", total=0, initial=0, unit="B", unit_scale=True, disable=True, name="t")
    reconstruct = cls(desc="Reconstructing", total=0, initial=0, unit="B", unit_scale=True, disable=True, name="r")
    files = cls(desc="Fetching 4 files", total=4, disable=True)
    return transfer, reconstruct, files


def test_bytes_and_files_are_recorded_once_and_cleared(caplog):
    transfer, reconstruct, files = bars("org/model")
    transfer.total = 2_000_000_000
    with caplog.at_level(logging.INFO, logger=download_progress.__name__):
        transfer.update(500_000_000)
        reconstruct.update(500_000_000)  # the same bytes written to disk: not counted twice
        files.update(1)
    state = active_downloads()["org/model"]
    assert (state["bytes"], state["total_bytes"], state["files"], state["total_files"]) == (
        500_000_000,
        2_000_000_000,
        1,
        4,
    )
    assert describe(state) == "0.50 of 2.00 GB, 1/4 files"
    assert any("Downloading org/model" in r.message for r in caplog.records)
    finished("org/model")
    assert "org/model" not in active_downloads()


class FakeControl:
    """Stands in for the Control deployment's handle: records what the agent reports."""

    def __init__(self):
        self.reports = []

        async def report(r):
            self.reports.append(r)

        self.report = SimpleNamespace(remote=report)


async def test_agent_reports_download_progress_while_loading(monkeypatch):
    monkeypatch.setattr(agent_module, "REPORT_WHILE_LOADING_S", 0.02)
    context = SimpleNamespace(replica_id=SimpleNamespace(unique_id="r1"))
    monkeypatch.setattr("ray.serve.get_replica_context", lambda: context)
    monkeypatch.setattr(agent_module, "memory_snapshot", lambda: {"mlx_active_bytes": 0})
    control = FakeControl()

    async def slow_load(model):
        transfer, _, _ = bars(model)
        transfer.total = 1000
        for _ in range(5):
            transfer.update(100)
            await asyncio.sleep(0.03)
        finished(model)

    async def nothing():
        return None

    agent = SlotAgent("llm", control, slow_load, nothing, lambda: [], fallback_default="a/model")
    await agent._load_reporting_progress("b/model")
    during = [r.loading for r in control.reports if r.loading]
    assert during and all(d["model"] == "b/model" for d in during)
    downloaded = [d["download"]["bytes"] for d in during if d["download"]]
    assert downloaded and downloaded == sorted(downloaded) and downloaded[-1] >= 100
    assert agent.loading is None


async def test_a_failed_load_still_raises_and_clears_loading(monkeypatch):
    monkeypatch.setattr(agent_module, "REPORT_WHILE_LOADING_S", 0.01)

    async def broken(model):
        await asyncio.sleep(0.05)
        raise RuntimeError("no weights")

    async def nothing():
        return None

    agent = SlotAgent("asr", None, broken, nothing, lambda: [], fallback_default="x")
    with pytest.raises(RuntimeError, match="no weights"):
        await agent._load_reporting_progress("y")
    assert agent.loading is None
