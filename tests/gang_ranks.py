"""Run under `mlx.launch -n N --backend ring`: every rank starts the LLM engine as one rank of a
sharded replica (deployments/llm/gang.py); rank 0 answers `requests` (JSON, argv[3]) through it
and prints the answers as one JSON line. tests/unit/llm/test_gang.py compares them with the
whole model's."""

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


async def main(model_dir: str, split: str, requests: list[dict]) -> None:
    import bench  # noqa: F401  (the BLAS, as a replica selects it)
    from deployments.llm.engine import EngineConfig, LLMEngine
    from deployments.llm.gang import GangSpec, Membership
    from tests.gang_requests import answer

    kind, size = split.split("=")
    spec = GangSpec(**{f"{kind}_parallel_size": int(size)})
    rank = int(os.environ["MLX_RANK"])
    membership = Membership(spec, rank, Path(os.environ["MLX_HOSTFILE"]).read_text())
    engine = await LLMEngine.start("gang", Path(model_dir), EngineConfig(gang=membership))
    if rank != 0:  # replays rank 0's rounds until rank 0 stops
        await asyncio.to_thread(engine._thread.join)
        return
    answers = await asyncio.gather(*(answer(engine, r) for r in requests))
    print("ANSWERS " + json.dumps(answers), flush=True)
    engine.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3])))
