"""Scenario 4, memory: resident memory (RSS, from /proc of the replica's own process) and MLX's
allocator counters of one slot replica, through a load/unload cycle driven by the control-plane
routes (POST /v1/models/unload, POST /v1/models/load, GET /v1/models/status).

A replica loads its default model before it reports ready, so the cycle starts loaded:
loaded at start -> unloaded (the "before load" state) -> loaded again -> unloaded again.
Slots the graph does not yet put under the control plane are reported as skipped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, rss_bytes, wait_ready
from bench.model import BENCH_CONFIG, SMOKE_CONFIG, ensure_bench_model
from bench.report import pyplot, saved, table

STAGES = ("loaded_at_start", "unloaded", "loaded_again", "unloaded_again")
DEPLOYMENT = {"llm": "LLM", "asr": "ASR", "tts": "TTS"}
SETTLE_S = 1.0  # let freed pages go back before reading RSS


async def _replica_memory(http: httpx.AsyncClient, slot: str) -> Optional[dict]:
    status = (await http.get("/v1/models/status")).json()
    replicas = status.get("slots", {}).get(slot, {}).get("replicas") or []
    return replicas[0].get("memory") if replicas else None


async def _post(http: httpx.AsyncClient, path: str, body: dict) -> None:
    r = await http.post(path, json=body)
    if r.status_code != 200:
        raise RuntimeError(f"{path} {body}: HTTP {r.status_code}: {r.text[:300]}")


async def measure_slot(cluster: BenchCluster, slot: str, args: dict, default_model: str, progress) -> dict:
    app = f"bench-memory-{slot}"
    url = cluster.deploy(app, {slot: args})
    try:
        await wait_ready(url)
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            if slot not in (await http.get("/v1/models/status")).json().get("slots", {}):
                return {"skipped": f"the {slot} slot is not under the control plane in this version"}
            pids = cluster.replica_pids(app, DEPLOYMENT[slot])
            if len(pids) != 1:
                raise RuntimeError(f"expected one {slot} replica, found {len(pids)}")
            pid, stages = pids[0], {}

            async def record(stage: str) -> None:
                await asyncio.sleep(SETTLE_S)
                reported = await _replica_memory(http, slot) or {}
                # /proc of the replica read from outside, next to what the replica reports itself.
                reported["reported_rss_bytes"] = reported.pop("rss_bytes", None)
                stages[stage] = {"rss_bytes": rss_bytes(pid), **reported}
                progress(f"memory: {slot} {stage}: RSS {stages[stage]['rss_bytes'] / 2**20:.0f} MiB")

            await record("loaded_at_start")
            await _post(http, "/v1/models/unload", {"model_type": slot})
            await record("unloaded")
            await _post(http, "/v1/models/load", {"model": default_model, "model_type": slot})
            await record("loaded_again")
            await _post(http, "/v1/models/unload", {"model_type": slot})
            await record("unloaded_again")
            return {"model": Path(default_model).name, "replica_pid": pid, "stages": stages}
    finally:
        cluster.delete(app)


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    llm_model = str(ensure_bench_model(cache_dir, SMOKE_CONFIG if opts.smoke else BENCH_CONFIG))
    from deployments.asr.config import ASRSlotConfig
    from deployments.tts.config import TTSSlotConfig

    plan = {
        "llm": ({"default_model": llm_model}, llm_model),
        "asr": ({"enabled": True}, ASRSlotConfig().default_model),
        "tts": ({"enabled": True}, TTSSlotConfig().default_model),
    }
    if opts.smoke:
        plan = {"llm": plan["llm"]}
    slots = {}
    for slot, (args, model) in plan.items():
        slots[slot] = await measure_slot(cluster, slot, args, model, progress)
    return {"stages": list(STAGES), "slots": slots}


def _mib(v) -> Optional[float]:
    return None if v is None else v / 2**20


def render(result: dict) -> str:
    rows = []
    for slot, info in result["slots"].items():
        if "skipped" in info:
            rows.append([slot, "skipped: " + info["skipped"], None, None, None])
            continue
        for stage in result["stages"]:
            s = info["stages"][stage]
            rows.append(
                [slot, stage, _mib(s.get("rss_bytes")), _mib(s.get("mlx_active_bytes")), _mib(s.get("mlx_cache_bytes"))]
            )
    return table(["slot", "stage", "RSS MiB", "MLX active MiB", "MLX cache MiB"], rows)


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    measured = {s: i for s, i in result["slots"].items() if "stages" in i}
    if plt is None or not measured:
        return None
    fig, axes = plt.subplots(1, len(measured), figsize=(5 * len(measured), 3.8), squeeze=False)
    for ax, (slot, info) in zip(axes[0], measured.items()):
        x = range(len(result["stages"]))
        rss = [_mib(info["stages"][s].get("rss_bytes")) or 0 for s in result["stages"]]
        active = [_mib(info["stages"][s].get("mlx_active_bytes")) or 0 for s in result["stages"]]
        ax.bar([i - 0.2 for i in x], rss, width=0.4, label="RSS")
        ax.bar([i + 0.2 for i in x], active, width=0.4, label="MLX active")
        ax.set_xticks(list(x), [s.replace("_", "\n") for s in result["stages"]], fontsize=8)
        ax.set_ylabel("MiB")
        ax.set_title(f"{slot} replica ({info['model']})", fontsize=9)
        ax.legend(fontsize=8)
    return saved(plt, fig, path, dpi=90)
