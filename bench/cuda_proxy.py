"""What the CUDA route adds on top of the worker: latency of the same "pong" request sent
straight to a worker-v0 shim, through the Ray-free shim client (which probes readiness before
every request), and through the Serve graph (ingress -> CudaProxy -> worker).

The worker is the test suite's fake shim on loopback, so the numbers are the proxy's own cost,
not GPU time. Not in the default set of scenarios (it measures no model):

    .venv/bin/python -m bench --scenarios cuda_proxy
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import httpx

from tests.fake_worker import FakeWorker

PUBLIC, SERVED = "qwen3-8b-cuda", "Qwen/Qwen3-8B"
PING = [{"role": "user", "content": "ping"}]


def summary(samples: list[float]) -> dict:
    ms = sorted(s * 1000 for s in samples)
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


async def timed(n: int, call) -> list[float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - start)
    return samples


async def measure(worker: FakeWorker, base_url: str, n: int, concurrency: int) -> dict:
    from deployments.cuda_proxy.client import ShimClient
    from deployments.cuda_proxy.config import CudaRoute
    from deployments.cuda_proxy.protocol import CudaChatRequest, generate_envelope, new_request_id

    route = CudaRoute(worker.url, worker.token, (PUBLIC,), SERVED, 60)
    request = CudaChatRequest(model=PUBLIC, messages=PING)
    headers = {"Authorization": f"Bearer {worker.token}"}
    results = {}
    async with httpx.AsyncClient(timeout=60) as http:

        async def direct():
            envelope = generate_envelope(request, new_request_id(), route, False)
            r = await http.post(f"{worker.url}/generate", json=envelope, headers=headers)
            assert r.status_code == 200

        async def graph(stream: bool = False):
            body = {"model": PUBLIC, "messages": PING, "stream": stream}
            r = await http.post(f"{base_url}/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text

        async def first_content():
            body = {"model": PUBLIC, "messages": PING, "stream": True}
            async with http.stream("POST", f"{base_url}/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if '"content"' in line:
                        return

        async def readyz():
            assert (await http.get(f"{base_url}/readyz")).status_code == 200

        shim = ShimClient(route)
        for name, call in [
            ("worker_direct_generate", direct),
            ("shim_client_complete", lambda: shim.complete(request)),
            ("graph_chat_non_stream", graph),
            ("graph_chat_stream_total", lambda: graph(True)),
            ("graph_chat_stream_first_content", first_content),
            ("graph_readyz", readyz),
        ]:
            await call()  # warm-up
            results[name] = summary(await timed(n, call))
        await shim.aclose()

        gate = asyncio.Semaphore(concurrency)

        async def gated():
            async with gate:
                await graph()

        start = time.perf_counter()
        await asyncio.gather(*(gated() for _ in range(concurrency * 4)))
        elapsed = time.perf_counter() - start
        results["graph_concurrent"] = {
            "concurrency": concurrency,
            "requests": concurrency * 4,
            "requests_per_s": round(concurrency * 4 / elapsed, 1),
        }
    return results


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    worker = FakeWorker(served_model=SERVED).start()
    try:
        args = {
            "scheduler_url": worker.url,
            "scheduler_token": worker.token,
            "scheduler_models": [PUBLIC],
            "served_model": SERVED,
        }
        url = cluster.deploy("bench-cuda", {"cuda": args})
        progress("cuda_proxy: graph with the CUDA route is up")
        n = 5 if opts.smoke else 50
        results = await measure(worker, url, n, 16)
    finally:
        cluster.delete("bench-cuda")
        worker.stop()
    return {"what": "CUDA route overhead against a loopback fake worker-v0 shim", "results": results}


def render(result: dict) -> str:
    from bench.report import table

    rows = [[name, m["p50_ms"], m["p90_ms"], m["mean_ms"]] for name, m in result["results"].items() if "p50_ms" in m]
    c = result["results"]["graph_concurrent"]
    return (
        table(["path", "p50 ms", "p90 ms", "mean ms"], rows)
        + f"\n\n{c['requests']} requests, {c['concurrency']} at a time through the graph: {c['requests_per_s']} requests/s"
    )


def plot(result: dict, path: Path):
    return None  # a latency table says it all
