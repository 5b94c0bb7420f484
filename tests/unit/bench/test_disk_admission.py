"""bench/disk_admission.py's workloads on the tiny model, in process: the one-off burst writes
nothing, the shared system prompt once, each conversation its earlier turns; a restarted
replica loads what was written. (On SmolLM2 at 128 requests: docs/performance.md.)"""

from __future__ import annotations

from bench.disk_admission import measure, render


async def test_each_workload_writes_what_is_read_again(tiny_llm_dir):
    result = await measure(tiny_llm_dir, requests=4, tokens=4, progress=lambda message: None)
    one_off, shared, talks = result["one_off"], result["shared_system"], result["conversations"]
    assert one_off["entries"] == 0 and one_off["bytes"] == 0 and one_off["admitted"]["seen_once"] == 12
    assert shared["entries"] == 1 and shared["restarted_replica_cached_tokens"] > 0
    # One conversation of three turns: the second and third each write the turn before.
    assert talks["requests"] == 3 and talks["entries"] == 2 and talks["restarted_replica_cached_tokens"] > 0
    assert "one_off | 4 | 0 |" in render({"workloads": result})
