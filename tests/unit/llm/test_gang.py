"""A sharded engine's ranks (deployments/llm/gang.py) under `mlx.launch` over MLX's ring backend on
loopback, without Ray: tensor parallel (the tiny Qwen3 on 2 ranks) and pipeline parallel (a tiny
Ministral 3 on 2 ranks) answer, greedy, as the whole model does: chat, a JSON schema, a forced
tool call, n=2 and log-probabilities in one batch; an idle gang's other ranks sleep rather than
poll. And the splits a model cannot take."""

import asyncio
import json
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.gang import (
    JOINING,
    PLACED,
    RESOLVING,
    Doorbell,
    GangSpec,
    Membership,
    StartWatch,
    check_model_dir,
    ring_hostfile,
)
from tests.gang_requests import answer
from tests.tiny_pipeline_model import ensure_tiny_pipeline_model

ROOT = Path(__file__).resolve().parents[3]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 6}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
NO_THINKING = {"enable_thinking": False}
REQUESTS = [
    {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 12, "temperature": 0, "logprobs": True},
    {
        "messages": [{"role": "user", "content": "A JSON answer"}],
        "max_tokens": 40,
        "temperature": 0,
        "chat_template_kwargs": NO_THINKING,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    },
    {
        "messages": [{"role": "user", "content": "Weather?"}],
        "max_tokens": 120,
        "temperature": 0,
        "chat_template_kwargs": NO_THINKING,
        "tools": [WEATHER],
        "tool_choice": "required",
    },
    {"messages": [{"role": "user", "content": "Twice"}], "max_tokens": 8, "temperature": 0, "n": 2},
]


def sharded_answers(model_dir: Path, split: str, ranks: int, doorbell: bool = True) -> tuple[list, list[float]]:
    """Rank 0's answers, and the CPU seconds each other rank took over 1.5 s of idling."""
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1] if doorbell else 0
    launch = Path(sys.executable).parent / "mlx.launch"
    command = [str(launch), "-n", str(ranks), "--backend", "ring", "--python", sys.executable]
    command += [str(ROOT / "tests" / "gang_ranks.py"), str(model_dir), split, json.dumps(REQUESTS), str(port)]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in run.stdout.splitlines() if line.startswith("ANSWERS ")]
    assert run.returncode == 0 and lines, run.stdout[-2000:] + run.stderr[-3000:]
    idle_cpu = [float(x) for x in re.findall(r"IDLE_CPU ([0-9.]+)", run.stdout)]
    assert len(idle_cpu) == ranks - 1, run.stdout[-2000:]
    return json.loads(lines[0][len("ANSWERS ") :]), idle_cpu


async def whole_answers(model_dir: Path) -> list:
    engine = await LLMEngine.start("whole", model_dir, EngineConfig())
    try:
        return json.loads(json.dumps(await asyncio.gather(*(answer(engine, r) for r in REQUESTS))))
    finally:
        engine.shutdown()


@pytest.mark.parametrize("split", ["tensor=2", "pipeline=2"])
async def test_a_sharded_engine_answers_as_the_whole_model(split, tiny_llm_dir, cache_dir):
    model_dir = tiny_llm_dir if split.startswith("tensor") else ensure_tiny_pipeline_model(cache_dir)
    whole = await whole_answers(model_dir)
    sharded, idle_cpu = await asyncio.to_thread(sharded_answers, model_dir, split, 2)
    assert [[c["content"] for c in a] for a in sharded] == [[c["content"] for c in a] for a in whole]
    assert [[c["calls"] for c in a] for a in sharded] == [[c["calls"] for c in a] for a in whole]
    assert sharded[2][0]["calls"] and json.loads(sharded[1][0]["content"]).keys() == {"ok", "n"}
    assert [t for t, _ in sharded[0][0]["logprobs"]] == [t for t, _ in whole[0][0]["logprobs"]]
    assert [v for _, v in sharded[0][0]["logprobs"]] == pytest.approx([v for _, v in whole[0][0]["logprobs"]], abs=2e-3)
    # Waiting for rank 0's next round in MLX's ring collective polled (~1.2 s of these 1.5);
    # the doorbell's wait sleeps.
    assert max(idle_cpu) < 0.3, idle_cpu


def test_splits_a_model_cannot_take_are_refused_naming_the_model_and_the_setting(tiny_llm_dir, smollm2_dir):
    with pytest.raises(ValueError, match=r"tensor_parallel_size 3 does not divide tiny's 4 attention heads"):
        check_model_dir(tiny_llm_dir, GangSpec(tensor_parallel_size=3), "tiny")
    with pytest.raises(ValueError, match=r"pipeline_parallel_size: mlx-lm cannot pipeline tiny \(qwen3\)"):
        check_model_dir(tiny_llm_dir, GangSpec(pipeline_parallel_size=2), "tiny")
    with pytest.raises(ValueError, match="use one of them"):
        check_model_dir(tiny_llm_dir, GangSpec(tensor_parallel_size=2, pipeline_parallel_size=2), "tiny")
    check_model_dir(smollm2_dir, GangSpec(tensor_parallel_size=3), "smollm2")  # 9 heads, 3 KV heads


def test_the_ring_hostfile_lists_one_address_per_rank():
    assert json.loads(ring_hostfile([("10.0.0.1", 5000), ("10.0.0.2", 5001)])) == [["10.0.0.1:5000"], ["10.0.0.2:5001"]]


def test_the_doorbell_wakes_each_rank_and_a_gone_rank_0_ends_their_wait():
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    ranks = [Membership(GangSpec(tensor_parallel_size=3), rank, "", f"127.0.0.1:{port}") for rank in range(3)]
    leader = Doorbell(ranks[0], timeout_s=10).open()  # listening before the others connect
    followers = [Doorbell(m, timeout_s=10) for m in ranks[1:]]
    threads = [threading.Thread(target=f.connect) for f in followers]
    for t in threads:
        t.start()
    leader.connect()
    for t in threads:
        t.join()
    woke = []
    waiting = [threading.Thread(target=lambda f=f: woke.append(f.wait())) for f in followers]
    for t in waiting:
        t.start()
    waiting[0].join(0.2)
    assert woke == []  # asleep until rank 0 rings
    leader.ring()
    for t in waiting:
        t.join(5)
    assert woke == [None, None]
    leader.close()
    for f in followers:
        with pytest.raises(ConnectionError, match="rank 0 of the gang is gone"):
            f.wait()
        f.close()


def test_a_rank_0_whose_load_fails_frees_its_doorbell_port(tiny_llm_dir, monkeypatch):
    """Rank 0 listens before the group forms; a join that fails closes the listener, so the port
    is free for the gang Serve starts next instead of held by a dead engine's socket."""
    import deployments.llm.engine as engine_module

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]

    def no_group(gang):
        raise RuntimeError("the ring did not form")

    monkeypatch.setattr(engine_module, "join_group", no_group)
    gang = Membership(GangSpec(tensor_parallel_size=2), 0, "[]", f"127.0.0.1:{port}")
    engine = LLMEngine("tiny", tiny_llm_dir, EngineConfig(gang=gang))
    try:
        engine._load()
    except RuntimeError as failure:  # held, as the engine's start holds it to report it
        assert "did not form" in str(failure)
        with socket.create_server(("", port)):  # free again
            pass
    else:
        pytest.fail("the load went on without a group")


def test_a_start_that_hangs_is_told_from_one_that_downloads():
    watch = StartWatch(timeout_s=120, now=0)
    assert watch.problem([PLACED, RESOLVING], now=60) is None
    assert watch.problem([RESOLVING, RESOLVING], now=600) is None  # a large model downloading
    assert watch.problem([JOINING, JOINING], now=610) is None
    assert watch.problem([JOINING, JOINING], now=700) is None
    assert "did not form their MLX group within 120 s" in watch.problem([JOINING, JOINING], now=731)
    never = StartWatch(timeout_s=120, now=0)
    assert never.problem([PLACED, None], now=100) is None
    assert never.problem([PLACED, None], now=121) == "rank 1, 2 did not begin within 120 s"
    # one rank joining, the other still fetching: the wait for the group has not begun
    mixed = StartWatch(timeout_s=120, now=0)
    assert mixed.problem([JOINING, RESOLVING], now=500) is None
