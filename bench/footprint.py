"""Scenario `footprint`: what each replica of the shipped config really uses, next to what it
reserves (docs/resources.md sizes Ray's `memory` resource from this).

Deploys serve_config.yaml as shipped (its args and `deployments:` block), reads every replica's
resident memory from /proc (VmRSS) when the graph is ready, then sends each slot one request
(chat, transcription, speech, image, embeddings, a VLM answer) and reads VmRSS and the peak (VmHWM) again. A replica whose
peak is above its reservation fails the scenario: the reservation would let Ray overcommit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.report import table
from bench.shipped import reserved, shipped_app

APP = "bench-footprint"
DEPLOYMENTS = ("Ingress", "Control", "LLM", "ASR", "TTS", "Image", "Embeddings", "VLM")
MiB = 2**20


def proc_memory(pid: int) -> dict:
    """VmRSS and VmHWM (peak RSS) of a process on this machine, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return {"rss_bytes": fields.get("VmRSS"), "peak_rss_bytes": fields.get("VmHWM")}


def vlm_image() -> str:
    """A 512x512 PNG, base64: the VLM's processor resizes it to its own limit."""
    import base64
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (512, 512), (90, 140, 200)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


async def exercise(http: httpx.AsyncClient, image_size: dict) -> dict:
    """One request per slot, as a user sends it; the HTTP status of each."""
    from bench.asr import utterance_wavs

    wav, _ = utterance_wavs(["The quick brown fox jumps over the lazy dog."])[0]
    requests = {
        "LLM": http.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 32}
        ),
        "ASR": http.post("/v1/audio/transcriptions", files={"file": ("u.wav", wav, "audio/wav")}),
        "TTS": http.post("/v1/audio/speech", json={"input": "A short sentence to speak.", "response_format": "wav"}),
        "Image": http.post("/v1/images/generations", json={"prompt": "a red fox", "steps": 2, **image_size}),
        "Embeddings": http.post("/v1/embeddings", json={"input": ["A short sentence to embed."] * 32}),
        "VLM": http.post(
            "/v1/vlm/completions", json={"image": vlm_image(), "prompt": "Describe it.", "max_tokens": 16}
        ),
    }
    codes = {}
    for name, request in requests.items():  # one after another: each peak is its own
        codes[name] = (await request).status_code
    return codes


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    args, options = shipped_app()
    args.pop("cache_dir", None)  # the bench's cache, not the user's
    url = cluster.deploy(APP, args, options)
    try:
        await wait_ready(url)
        pids = {name: cluster.replica_pids(APP, name) for name in DEPLOYMENTS}
        idle = {name: [proc_memory(pid) for pid in p] for name, p in pids.items()}
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            # The default size (512x512) unless --smoke: the image peak is its VAE decode.
            codes = await exercise(http, {"size": "64x64"} if opts.smoke else {})
        await asyncio.sleep(1)
        busy = {name: [proc_memory(pid) for pid in p] for name, p in pids.items()}
    finally:
        cluster.delete(APP)
    replicas = {}
    for name in DEPLOYMENTS:
        if not pids[name]:
            continue
        ask = reserved(options, name)
        peak = max(m["peak_rss_bytes"] for m in busy[name])
        replicas[name] = {
            "idle_rss_bytes": idle[name][0]["rss_bytes"],
            "after_request_rss_bytes": busy[name][0]["rss_bytes"],
            "peak_rss_bytes": peak,
            "request_status": codes.get(name),
            **ask,
            "fits": ask["memory_bytes"] is None or peak <= ask["memory_bytes"],
        }
        progress(f"footprint: {name}: idle {idle[name][0]['rss_bytes'] / MiB:.0f} MiB, peak {peak / MiB:.0f} MiB")
    failed = any(not r["fits"] for r in replicas.values()) or any(c != 200 for c in codes.values())
    return {"replicas": replicas, "failed": failed}


def render(result: dict) -> str:
    def mib(v: Optional[int]):
        return None if v is None else v / MiB

    rows = [
        [
            name,
            mib(r["idle_rss_bytes"]),
            mib(r["after_request_rss_bytes"]),
            mib(r["peak_rss_bytes"]),
            mib(r["memory_bytes"]),
            r["num_cpus"],
            r["request_status"],
        ]
        for name, r in result["replicas"].items()
    ]
    return table(
        [
            "replica",
            "idle RSS MiB",
            "after a request MiB",
            "peak RSS MiB",
            "reserved memory MiB",
            "num_cpus",
            "request",
        ],
        rows,
    )


def plot(result: dict, path: Path) -> None:
    return None
