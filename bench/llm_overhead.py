"""Where the graph's own time per token goes, outside the model: a sampled profile of every
process a streamed chat token crosses, under a steady load on a model whose step is cheap.

`python -m bench.llm_overhead [--streams 4] [--tokens 64] [--seconds 20] [--tag before]`

The bench's smoke-size model (bench/model.py `SMOKE_CONFIG`, a decode step of well under a
millisecond) makes the model's share small, so what shows is the serving path: Serve's HTTP
proxy, the ingress (FastAPI, the chat route, SSE framing) and the LLM replica (the engine thread
and the deployment's asyncio side), with the two Ray hops between them. While `streams` clients
each send one streamed chat request after another, the harness

- reads each process's CPU time (/proc, user + system) over the window: CPU ms per generated
  token, per process, and the same for `mlx_lm.server` on the same model and load (its one
  process is the whole of its serving path);
- samples each graph process with py-spy (`--nonblocking`, so the sampled process is not
  paused; 100 Hz; idle threads left out) and writes the collapsed stacks and a text summary:
  the hottest leaf frames, the frames by inclusive share, and the shares of what the time was
  spent on (Ray's object transfer, Serve's handle and router, pydantic, JSON, asyncio, ...).

The summaries go to <out>/llm-overhead-<tag>.txt (bench/results/profiles/ by default), with the
raw stacks next to them under /tmp (large). Needs py-spy (the `bench` extra) and ptrace rights
over the Ray workers (root, or kernel.yama.ptrace_scope 0). Section "Profiles" of
docs/performance.md reads these files.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.cluster import BenchCluster, wait_ready
from bench.llm import Timing, chat_body, prompt_text, stream_chat, wave_metrics
from bench.model import SMOKE_CONFIG, ensure_bench_model
from bench.peers import mlx_lm_server

ROOT = Path(__file__).resolve().parents[1]
APP = "ovh"

# What a frame's time was spent on, first match wins (a frame is "function (file:line)").
CATEGORIES = [
    ("model step (mlx, mlx_lm)", r"mlx_lm/|mlx/|\(mlx\)|mlx::"),
    ("pydantic (validation, dump)", r"pydantic"),
    ("json", r"json/|orjson|ujson"),
    ("Serve proxy/ASGI (uvicorn, starlette, fastapi)", r"uvicorn|starlette|fastapi|h11|httptools"),
    ("Serve handle, router, replica (ray.serve)", r"ray/serve/"),
    (
        "Ray core (object transfer, serialization, gRPC)",
        r"ray/_private|ray/_raylet|_raylet|ray/util|grpc|pickle|cloudpickle",
    ),
    ("asyncio event loop", r"asyncio/|uvloop|selectors"),
    ("logging", r"logging/"),
    # Below a thread's entry frame with no Python frame under it: native code on that thread
    # (Ray's core worker threads, the gRPC and thread-pool threads it serializes items on).
    ("native code on Ray's and pool threads", r"\(threading\.py|concurrent/futures/"),
    ("this project (deployments/)", r"deployments/"),
]


def py_spy() -> str | None:
    """py-spy next to this interpreter (a venv not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def replica_serve_env(pid: int) -> str:
    """The RAY_SERVE_* variables a replica process runs with (what it inherited from Ray)."""
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return " ".join(sorted(p.decode() for p in pairs if p.startswith(b"RAY_SERVE_")))


def short(frame: str) -> str:
    """`fn (/long/path/site-packages/ray/serve/x.py:12)` -> `fn (ray/serve/x.py:12)`."""
    return re.sub(r"\((?:[^()]*/(?:site-packages|lib/python3\.\d+)/|/work/[^/]+/)", "(", frame)


def category(frame: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, frame):
            return name
    return "other"


def summarize(raw: Path, title: str, top: int = 25) -> str:
    """A py-spy collapsed-stack file as text: leaf frames, inclusive frames, categories."""
    leaf: Counter = Counter()
    inclusive: Counter = Counter()
    categories: Counter = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = [short(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))] or frames
        total += n
        leaf[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
        # The leaf's category, unless the leaf is a C call / builtin inside a known caller.
        for f in reversed(frames):
            c = category(f)
            if c != "other":
                categories[c] += n
                break
        else:
            categories["other"] += n
    if not total:
        return f"## {title}\n\n(no samples)\n"

    def rows(counter: Counter) -> list[str]:
        return [f"{100 * n / total:5.1f}%  {name}" for name, n in counter.most_common(top)]

    return "\n".join(
        [
            f"## {title}",
            f"{total} samples of non-idle threads",
            "",
            "### by what the time was spent on (the innermost frame with a known owner)",
            *rows(categories),
            "",
            "### leaf frames (self time)",
            *rows(leaf),
            "",
            "### frames by inclusive share",
            *rows(inclusive),
            "",
        ]
    )


async def load(url: str, streams: int, tokens: int, seconds: float) -> list[Timing]:
    """`streams` clients, each sending one request after another until `seconds` have passed."""
    deadline = time.perf_counter() + seconds
    timings: list[Timing] = []
    async with httpx.AsyncClient(timeout=httpx.Timeout(120), limits=httpx.Limits(max_connections=64)) as http:

        async def client(i: int) -> None:
            n = 0
            while time.perf_counter() < deadline:
                timings.append(await stream_chat(http, url, chat_body(prompt_text(1000 + i, n), tokens)))
                n += 1

        await asyncio.gather(*(client(i) for i in range(streams)))
    return timings


def measure_window(pids: dict[str, int], timings: list[Timing], t0: float, cpu0: dict[str, float]) -> dict:
    tokens = sum(t.tokens for t in timings)
    cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
    return {
        **wave_metrics(timings, t0),
        "requests": len(timings),
        "tokens": tokens,
        "cpu_ms_per_token": {name: 1000 * s / tokens for name, s in cpu.items()},
        "cpu_ms_per_request": {name: 1000 * s / len(timings) for name, s in cpu.items()},
    }


def total_cpu(m: dict) -> float:
    return sum(m["cpu_ms_per_token"].values())


def describe(name: str, m: dict) -> str:
    per_token = ", ".join(f"{k} {v:.2f}" for k, v in m["cpu_ms_per_token"].items())
    per_request = ", ".join(f"{k} {v:.1f}" for k, v in m["cpu_ms_per_request"].items())
    return (
        f"{name}: {m['requests']} requests, {m['tokens_per_s']:.0f} tok/s, TTFT p50 {m['ttft_p50_ms']:.1f} ms, "
        f"ITL p50 {m['itl_p50_ms']:.2f} ms\n  CPU ms per token: {per_token}"
        f" (total {total_cpu(m):.2f})\n  CPU ms per request: {per_request}"
    )


async def run_graph(cluster: BenchCluster, model_dir: Path, opts, raw_dir: Path) -> tuple[dict, dict[str, Path]]:
    llm = {"default_model": str(model_dir), "models": [], "batching": True}
    base = cluster.deploy(APP, {"llm": llm})
    await wait_ready(base)
    url = f"{base}/v1/chat/completions"
    await load(url, opts.streams, opts.tokens, 3)  # warm-up
    from deployments.ray_internals import live_actor_pids

    pids = {
        "proxy": live_actor_pids("ProxyActor")[0],
        "ingress": cluster.replica_pids(APP, "Ingress")[0],
        "llm": cluster.replica_pids(APP, "LLM")[0],
    }
    serve_env = replica_serve_env(pids["ingress"])
    # Unprofiled first: py-spy's sampling costs the sampled processes a little.
    t0, cpu0 = time.perf_counter(), {k: cpu_seconds(p) for k, p in pids.items()}
    plain = measure_window(pids, await load(url, opts.streams, opts.tokens, opts.seconds), t0, cpu0)
    if opts.no_profile:
        cluster.delete(APP)
        return {"plain": plain, "pids": pids, "serve_env": serve_env}, {}
    raws = {name: raw_dir / f"{name}.txt" for name in pids}
    spies = []
    for name, pid in pids.items():
        cmd = [py_spy(), "record", "--pid", str(pid), "--duration", str(int(opts.seconds)), "--rate", "100"]
        cmd += ["--format", "raw", "--output", str(raws[name]), "--nonblocking"]
        cmd += ["--native"] if opts.native else []
        spies.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    await asyncio.sleep(1)  # attached
    t0, cpu0 = time.perf_counter(), {k: cpu_seconds(p) for k, p in pids.items()}
    sampled = measure_window(pids, await load(url, opts.streams, opts.tokens, opts.seconds - 2), t0, cpu0)
    for spy in spies:
        spy.wait(timeout=60)
    cluster.delete(APP)
    return {"plain": plain, "sampled": sampled, "pids": pids, "serve_env": serve_env}, raws


async def run_peer(model_dir: Path, opts, work: Path) -> dict:
    server = mlx_lm_server(model_dir, opts.tokens, work / "mlx_lm_server.log")
    try:
        await server.wait_ready()
        url = f"{server.url}/v1/chat/completions"
        await load(url, opts.streams, opts.tokens, 3)
        pids = {"mlx_lm.server": server.proc.pid}
        t0, cpu0 = time.perf_counter(), {k: cpu_seconds(p) for k, p in pids.items()}
        return measure_window(pids, await load(url, opts.streams, opts.tokens, opts.seconds), t0, cpu0)
    finally:
        server.stop()


async def main(opts) -> None:
    if py_spy() is None:
        raise SystemExit("py-spy is not installed (pip install py-spy, or the bench extra)")
    model_dir = ensure_bench_model(opts.cache_dir, SMOKE_CONFIG)
    raw_dir = Path(tempfile.mkdtemp(prefix=f"llm-overhead-{opts.tag}-"))
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        peer = await run_peer(model_dir, opts, Path(work))
        with BenchCluster(opts.cache_dir) as cluster:
            graph, raws = await run_graph(cluster, model_dir, opts, raw_dir)
    load_after = os.getloadavg()
    head = [
        f"# LLM serving overhead, tag '{opts.tag}', {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        f"`python -m bench.llm_overhead --streams {opts.streams} --tokens {opts.tokens} --seconds {opts.seconds}`:"
        f" smoke model ({model_dir.name}), {opts.streams} clients each sending streamed chat requests of"
        f" {opts.tokens} tokens back to back.",
        f"load average before {load_before[0]:.2f} / after {load_after[0]:.2f} (shared 2-core machine)",
        "",
        describe("mlx_lm.server", peer),
        describe("graph, not sampled", graph["plain"]),
    ]
    if not opts.no_profile:
        head += [describe("graph, sampled by py-spy", graph["sampled"]), f"raw stacks: {raw_dir}"]
    head += [
        f"graph / mlx_lm.server CPU per token: {total_cpu(graph['plain']) / total_cpu(peer):.2f}",
        f"the ingress replica's Serve settings: {graph['serve_env'] or 'Ray defaults'}",
        "",
    ]
    text = "\n".join(head + [summarize(raws[name], f"{name} (pid {graph['pids'][name]})") for name in raws])
    opts.out.mkdir(parents=True, exist_ok=True)
    path = opts.out / f"llm-overhead-{opts.tag}.txt"
    path.write_text(text)
    print(text)
    print(path)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.llm_overhead", description=__doc__)
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--tag", default="now")
    p.add_argument("--no-profile", action="store_true", help="CPU per token only, no py-spy")
    p.add_argument("--native", action="store_true", help="py-spy --native: C frames too (slower sampling)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "profiles")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
