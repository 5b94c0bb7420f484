"""Scenario `coldstart`: how long a new TTS replica takes, from Serve being asked for it to the
replica serving, and where that time goes.

- total: the shipped TTS slot (serve_config.yaml's options, built-in tiny model; a short
  downscale delay so rounds do not wait minutes) at one replica gets speech requests until
  the autoscaler adds a replica; the time from Serve showing it STARTING to RUNNING, and from
  the load's start to RUNNING (then the load stops and the slot comes back to one).
- breakdown: a probe actor with the replica's ray_actor_options does a replica's steps in its
  order and stamps each: worker start (submitted -> its process exists -> its constructor
  runs), imports (Ray Serve; the TTS deployment module; MLX and mlx-audio, which the engine
  imports when it starts), model load (the engine starting with the built-in model, warm-up
  included).
  What is left of the total is Serve's own work (replica actor set-up, the first health check,
  the controller noticing).
- import profile: `python -X importtime` of what a replica imports, each top-level package's
  own import time summed: what to shorten first.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import table
from bench.shipped import shipped_app, status_of
from deployments.tts.tiny_model import TINY_TTS_ID

APP = "bench-coldstart"
DEPLOYMENT_MODULE = "deployments.tts.deployment"
ENGINE_IMPORTS = ("mlx.core", "mlx_audio.tts.utils")  # imported by TTSEngine.start
SCALING = {"min_replicas": 1, "max_replicas": 2, "downscale_delay_s": 5}  # over the shipped ones
TEXT = " ".join(["The quick brown fox jumps over the lazy dog, then it runs far away."] * 40)


def _probe_class():
    """Defined here so that cloudpickle ships it by value: the worker imports nothing for it."""
    import ray

    @ray.remote
    class ReplicaSteps:
        def __init__(self, submitted: float, cache_dir: str):
            entered = time.time()
            import psutil

            self.stamps = {
                "submitted": submitted,
                "process_created": psutil.Process().create_time(),
                "constructor": entered,
            }
            import ray.serve  # noqa: F401  (a replica's first import)

            self.stamps["serve_imported"] = time.time()
            import importlib

            importlib.import_module(DEPLOYMENT_MODULE)
            self.stamps["deployment_imported"] = time.time()
            for module in ENGINE_IMPORTS:
                importlib.import_module(module)
            self.stamps["engine_imported"] = time.time()
            from deployments.tts.engine import TTSEngine
            from deployments.tts.tiny_model import ensure_tiny_tts

            async def load():
                engine = await TTSEngine.start(TINY_TTS_ID, ensure_tiny_tts(Path(cache_dir)))
                engine.shutdown()

            asyncio.run(load())
            self.stamps["model_loaded"] = time.time()

        def report(self) -> dict:
            return self.stamps

    return ReplicaSteps


def breakdown(cache_dir: Path, actor_options: dict) -> dict:
    import ray

    probe = _probe_class().options(**actor_options).remote(time.time(), str(cache_dir))
    s = ray.get(probe.report.remote())
    ray.kill(probe)
    return {
        "process_spawn_s": max(0.0, s["process_created"] - s["submitted"]),  # 0: Ray reused an idle worker
        "worker_start_s": s["constructor"] - s["submitted"],
        "import_serve_s": s["serve_imported"] - s["constructor"],
        "import_deployment_s": s["deployment_imported"] - s["serve_imported"],
        "import_mlx_audio_s": s["engine_imported"] - s["deployment_imported"],
        "model_load_s": s["model_loaded"] - s["engine_imported"],
        "steps_total_s": s["model_loaded"] - s["submitted"],
    }


def import_profile(top: int = 12) -> list[dict]:
    """Top-level packages by their own import time (summed over their modules) of what a
    replica imports, in a fresh interpreter."""
    code = "; ".join(f"import {m}" for m in ("ray.serve", DEPLOYMENT_MODULE, *ENGINE_IMPORTS))
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=300)
    by_package: dict[str, int] = {}
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if m:
            package = m.group(2).split(".")[0]
            by_package[package] = by_package.get(package, 0) + int(m.group(1))
    ranked = sorted(by_package.items(), key=lambda kv: -kv[1])[:top]
    return [{"package": name, "self_s": us / 1e6} for name, us in ranked]


async def scale_up_once(url: str) -> dict:
    """Load the one replica until the autoscaler adds one; when it showed STARTING and RUNNING."""

    async def speak(http: httpx.AsyncClient) -> None:
        while True:
            r = await http.post(
                f"{url}/v1/audio/speech", json={"model": TINY_TTS_ID, "input": TEXT, "response_format": "pcm"}
            )
            r.raise_for_status()

    async with httpx.AsyncClient(timeout=600) as http:
        t0, starting = time.monotonic(), None
        load = [asyncio.create_task(speak(http)) for _ in range(4)]
        try:
            while True:
                states = status_of(APP, "TTS") or {}
                if starting is None and states.get("STARTING"):
                    starting = time.monotonic()
                if states.get("RUNNING", 0) >= 2:
                    break
                if any(task.done() for task in load):
                    await next(task for task in load if task.done())  # raises the request's error
                await asyncio.sleep(0.1)
        finally:
            for task in load:
                task.cancel()
            await asyncio.gather(*load, return_exceptions=True)
    ready = time.monotonic()
    return {"starting_to_running_s": ready - (starting or ready), "load_to_running_s": ready - t0}


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    shipped_args, shipped_options = shipped_app()
    args = {"tts": {**shipped_args["tts"], "default_model": TINY_TTS_ID}}
    tts = shipped_options["TTS"]
    scaling = {**tts["autoscaling_config"], **SCALING}
    options = {"Ingress": shipped_options["Ingress"], "TTS": {**tts, "autoscaling_config": scaling}}
    rounds = 1 if opts.smoke else 3
    totals, steps = [], []
    try:
        url = cluster.deploy(APP, args, options)
        await wait_ready(url)
        for i in range(rounds):
            totals.append(await scale_up_once(url))
            while status_of(APP, "TTS") != {"RUNNING": 1}:  # back to one before the next round
                await asyncio.sleep(0.5)
            steps.append(breakdown(cache_dir, tts["ray_actor_options"]))
            progress(f"coldstart: round {i + 1}/{rounds}: {totals[-1]}; steps {steps[-1]}")
    finally:
        cluster.delete(APP)
    median_steps = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    total = {k: statistics.median(t[k] for t in totals) for k in totals[0]}
    return {
        "model": TINY_TTS_ID,
        "rounds": rounds,
        "replica": total,
        "replica_all": totals,
        "steps": median_steps,
        "steps_all": steps,
        "serve_overhead_s": total["starting_to_running_s"] - median_steps["steps_total_s"],
        "import_profile": import_profile(),
    }


def render(result: dict) -> str:
    s = result["steps"]
    rows = [
        ["worker start (submit -> constructor)", s["worker_start_s"]],
        ["  of which process spawn", s["process_spawn_s"]],
        ["import ray.serve", s["import_serve_s"]],
        [f"import {DEPLOYMENT_MODULE}", s["import_deployment_s"]],
        ["import mlx.core, mlx_audio.tts.utils", s["import_mlx_audio_s"]],
        ["model load (built-in tiny, warm-up included)", s["model_load_s"]],
        ["the steps above", s["steps_total_s"]],
        ["Serve's own (rest of STARTING -> RUNNING)", result["serve_overhead_s"]],
        ["replica STARTING -> RUNNING", result["replica"]["starting_to_running_s"]],
        ["load starts -> second replica RUNNING", result["replica"]["load_to_running_s"]],
    ]
    profile = table(["package", "own import s"], [[p["package"], p["self_s"]] for p in result["import_profile"]])
    return (
        table(["TTS replica cold start", "s (median)"], rows) + f"\n\nWhat a replica imports, by package:\n\n{profile}"
    )


def plot(result: dict, path: Path) -> None:
    return None
