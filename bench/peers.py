"""The peers a scenario runs side by side with the graph: each as its own subprocess on a free
loopback port, multiplying with the BLAS this process chose (deployments/blas.py), so the
comparison is between servers, not BLAS libraries.

- `mlx_lm_server(model_dir, tokens, log, blas_threads)`: `python -m mlx_lm server` (bench/llm.py,
  prefix.py), with one OpenBLAS thread unless told more;
- `mlx_audio_server(log)`: `python -m mlx_audio.server` (bench/asr_stream.py: its realtime
  transcription WebSocket; bench/mixed.py: its transcription and speech routes), through
  bench/mlx_audio_cpu.py where MLX has no GPU backend.
- `faster_whisper_server(model_dir, threads, log)`: bench/fw_server.py, faster-whisper's
  `WhisperModel` behind a small HTTP server (bench/asr_peers.py). CTranslate2 brings its own
  GEMM (oneDNN/MKL), so nothing is preloaded there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from bench.cluster import free_port, wait_ready
from deployments import blas


class PeerServer:
    """A server subprocess; `await wait_ready()` polls `ready_path` until it answers 200."""

    def __init__(self, name: str, args: list[str], log: Path, ready_path: str, env: Optional[dict] = None):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.ready_path = ready_path
        self.log = open(log, "wb")
        cmd = [sys.executable, "-m", *args, "--host", "127.0.0.1", "--port", str(self.port)]
        env = env if env is not None else blas.subprocess_env(blas.select())
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    async def wait_ready(self, timeout_s: float = 120) -> None:
        await wait_ready(self.url, timeout_s, self.ready_path, alive=self._alive)

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode} (see {self.log.name})")

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM, then SIGKILL after `grace_s`: uvicorn (mlx_audio.server) waits on SIGTERM for
        the work of clients that already left (the mixed load's cancelled speech), which a
        benchmark does not need finished; the smoke test waited 20 s for it."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def mlx_lm_server(
    model_dir: Path, tokens: int, log: Path, blas_threads: Optional[int] = None, extra: tuple[str, ...] = ()
) -> PeerServer:
    """`blas_threads`: OpenBLAS threads for the server (default: one, as every system gets);
    `extra`: more of its arguments (`--draft-model DIR`, say)."""
    args = ["mlx_lm", "server", "--model", str(model_dir), "--temp", "0", "--max-tokens", str(tokens), *extra]
    env = blas.subprocess_env(blas.select())
    if blas_threads is not None:
        env[blas.THREADS_ENV] = str(blas_threads)
    return PeerServer("mlx_lm.server", [*args, "--log-level", "WARNING"], log, "/v1/models", env)


def mlx_audio_server(log: Path, cache_dir: Optional[Path] = None) -> PeerServer:
    env = blas.subprocess_env(blas.select())
    if cache_dir:
        env["OMINIX_CACHE_DIR"] = str(cache_dir)  # where Kokoro's G2P alias is
    return PeerServer("mlx_audio.server", ["bench.mlx_audio_cpu"], log, "/v1/models", env)


def faster_whisper_server(model_dir: Path, threads: int, log: Path) -> PeerServer:
    root = str(Path(__file__).resolve().parents[1])  # bench.fw_server importable from any cwd
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": path}
    args = ["bench.fw_server", "--model", str(model_dir), "--threads", str(threads)]
    return PeerServer("faster-whisper", args, log, "/v1/models", env=env)
