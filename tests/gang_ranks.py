"""Run under `mlx.launch -n N --backend ring`: every rank starts the LLM engine as one rank of a
sharded replica (deployments/llm/gang.py); rank 0 answers `requests` (JSON, argv[3]) through it
and prints the answers as one JSON line. tests/unit/llm/test_gang.py compares them with the
whole model's.

Rank 0 first idles for IDLE_S; each other rank prints the CPU time its process took over most of
that spell (IDLE_CPU), which the doorbell (argv[4], rank 0's port) keeps near zero."""

import asyncio
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


IDLE_S = 2.0


def print_idle_cpu(window_s: float) -> None:
    began = time.process_time()
    time.sleep(window_s)
    print(f"IDLE_CPU {time.process_time() - began:.3f}", flush=True)


async def main(model_dir: str, split: str, requests: list[dict], doorbell_port: int) -> None:
    import bench  # noqa: F401  (the BLAS, as a replica selects it)
    from deployments.llm.engine import EngineConfig, LLMEngine
    from deployments.llm.gang import GangSpec, Membership
    from tests.gang_requests import answer

    kind, size = split.split("=")
    spec = GangSpec(**{f"{kind}_parallel_size": int(size)})
    rank = int(os.environ["MLX_RANK"])
    doorbell = f"127.0.0.1:{doorbell_port}" if doorbell_port else ""
    membership = Membership(spec, rank, Path(os.environ["MLX_HOSTFILE"]).read_text(), doorbell)
    engine = await LLMEngine.start("gang", Path(model_dir), EngineConfig(gang=membership))
    if rank != 0:  # replays rank 0's rounds until rank 0 stops
        threading.Thread(target=print_idle_cpu, args=(IDLE_S * 0.75,), daemon=True).start()
        await asyncio.to_thread(engine._thread.join)
        return
    await asyncio.sleep(IDLE_S)
    answers = await asyncio.gather(*(answer(engine, r) for r in requests))
    print("ANSWERS " + json.dumps(answers), flush=True)
    engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])))
