"""One model over several processes: the graph's LLM slot with `tensor_parallel_size: 3` beside
`mlx.launch -n 3 --backend ring` running mlx_lm.server on the same model, and each unsharded.

`python -m bench --scenarios sharded`

All on this one machine over MLX's ring backend on loopback: it measures what the gang costs
(the collectives of each step, the rounds rank 0 shares), not what a Thunderbolt link between
Macs would give. The model: a random-weight Qwen3 shaped like SmolLM2-135M where it matters to a
split (9 attention heads, 3 key/value heads, head dim 64, so 3 ranks divide it), whose
end-of-sequence logit never wins, so every system generates exactly the tokens asked for
(bench/model.py). Streams of 1, 4 and 16 streamed chat requests (bench/llm.py's waves): tok/s
and time to first token. Each system runs alone, the others stopped.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Optional

import httpx

from bench.cluster import free_port, wait_ready
from bench.llm import measure, stream_chat
from bench.model import ensure_bench_model
from bench.report import saved, table
from bench.stats import ratio
from deployments import blas
from deployments.llm import tiny_model

ROOT = Path(__file__).resolve().parents[1]
TP = 3
SYSTEMS = ("graph_tp3", "mlx_lm_server_tp3", "graph", "mlx_lm_server")
SHARDED_CONFIG = {
    **tiny_model.MODEL_CONFIG,
    "hidden_size": 576,
    "num_hidden_layers": 12,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 32768,
    "tie_word_embeddings": False,
}


class LaunchedServer:
    """mlx_lm.server under `mlx.launch -n <ranks> --backend ring` (rank 0 serves HTTP)."""

    def __init__(self, model_dir: Path, ranks: int, tokens: int, log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        launch = Path(sys.executable).parent / "mlx.launch"
        command = [str(launch), "-n", str(ranks), "--backend", "ring", "--python", sys.executable]
        command += [str(ROOT / "bench" / "mlx_lm_launch.py"), "--model", str(model_dir), "--temp", "0"]
        # No --host: mlx.launch's own options take it as an ambiguous prefix of --hosts;
        # mlx_lm.server listens on 127.0.0.1 by default.
        command += ["--max-tokens", str(tokens), "--port", str(self.port)]
        self.log = open(log, "wb")
        env = blas.subprocess_env(blas.select())
        self.proc = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    async def wait_ready(self) -> None:
        def alive() -> None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlx.launch mlx_lm.server exited with {self.proc.returncode} ({self.log.name})")

        await wait_ready(self.url, 300, "/v1/models", alive=alive)

    def stop(self) -> None:
        import os
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


@contextlib.asynccontextmanager
async def started(system: str, cluster, model_dir: Path, tokens: int, work: Path, http: httpx.AsyncClient):
    """`system` serving `model_dir` until the block ends: its streamed-chat call."""
    from bench.peers import mlx_lm_server

    if system.startswith("graph"):
        llm = {"default_model": str(model_dir), "models": [], "disk_cache_bytes": 0}
        if system.endswith("tp3"):
            llm.update(tensor_parallel_size=TP, placement_strategy="PACK")
        name = f"bench-{system.replace('_', '-')}"
        url = cluster.deploy(name, {"llm": llm})
        try:
            await wait_ready(url, 600)
            yield lambda body: stream_chat(http, f"{url}/v1/chat/completions", body)
        finally:
            cluster.delete(name)
        return
    if system.endswith("tp3"):
        server = LaunchedServer(model_dir, TP, tokens, work / f"{system}.log")
    else:
        server = mlx_lm_server(model_dir, tokens, work / f"{system}.log")
    try:
        await server.wait_ready()
        yield lambda body: stream_chat(http, f"{server.url}/v1/chat/completions", body)
    finally:
        server.stop()


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    smoke = opts.preset == "smoke"
    concurrency = [1, 2] if smoke else [1, 4, 16]
    tokens = 4 if smoke else 32
    repeats = 1 if smoke else 2
    model_dir = ensure_bench_model(cache_dir, SHARDED_CONFIG)
    http = httpx.AsyncClient(timeout=httpx.Timeout(900), limits=httpx.Limits(max_connections=64))
    results = {}
    try:
        # One system at a time, the others stopped: an idle mlx.launch gang's ranks wait for
        # rank 0 inside MLX's ring collective, which polls, and would take the CPU the
        # measured system needs on this one machine.
        for system in SYSTEMS:
            async with started(system, cluster, model_dir, tokens, work, http) as call:
                progress(f"sharded: {system} is up")
                results.update(await measure({system: call}, concurrency, repeats, tokens, progress))
    finally:
        await http.aclose()
    top = str(max(concurrency))
    return {
        "model": model_dir.name,
        "ranks": TP,
        "tokens_per_request": tokens,
        "concurrency": concurrency,
        "results": results,
        "graph_tp3_vs_peer_tp3": ratio(
            results["graph_tp3"][top]["tokens_per_s"], results["mlx_lm_server_tp3"][top]["tokens_per_s"]
        ),
    }


def render(result: dict) -> str:
    rows = []
    for c in result["concurrency"]:
        for system in SYSTEMS:
            m = result["results"][system][str(c)]
            rows.append([c, system, m["tokens_per_s"], m["ttft_p50_ms"]])
    out = table(["streams", "system", "tok/s", "TTFT p50 ms"], rows)
    return (
        out
        + f"\n\ngraph TP={result['ranks']} / mlx_lm.server TP={result['ranks']} at {max(result['concurrency'])} streams: {result['graph_tp3_vs_peer_tp3']:.2f}x"
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    from bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.5))
    levels = result["concurrency"]
    width = 0.2
    for k, system in enumerate(SYSTEMS):
        values = [result["results"][system][str(c)]["tokens_per_s"] for c in levels]
        ax.bar(
            [i + (k - 1.5) * width for i in range(len(levels))],
            values,
            width,
            label=system,
            hatch="//" if "server" in system else None,
        )
    ax.set_xticks(range(len(levels)), [f"{c} streams" for c in levels])
    ax.set_ylabel("tokens/s")
    ax.set_title(f"Tensor parallel over {result['ranks']} ranks, ring on loopback, one machine")
    ax.legend(fontsize=8)
    return saved(plt, fig, path)
