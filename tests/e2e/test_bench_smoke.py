"""The benchmark harness at smoke size (`python -m bench --smoke`), end to end on its own private
Ray cluster: one LLM scenario with its peer (the graph beside mlx_lm.server) and one audio
scenario (ASR), so the cluster, the peers' command lines, the JSON results, the plots and the
tables cannot rot. The other scenarios share that harness; their logic (statistics, reports,
targets, peer command lines) is tested in process under tests/unit/bench/, and `make bench` runs
them all (docs/testing.md). No timing is asserted: only that the work was done, equal, and
recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("llm", "asr")
LLM_SYSTEMS = ["graph", "mlx_lm_server"]  # the graph and its peer, on the same requests


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory, cache_dir):
    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en
    from deployments.llm.smollm2 import ensure_smollm2

    out = tmp_path_factory.mktemp("bench-results")
    env_cache = str(cache_dir)  # the session's model cache: each real model is converted once
    # Converted before the graphs start, as a running server's cache holds them (the smoke runs
    # beside the in-process tests, on a cache of its own, before the e2e graph has converted any).
    for ensure in (ensure_whisper_tiny_en, ensure_smollm2):
        ensure(cache_dir)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--scenarios",
            ",".join(SCENARIOS),
            "--llm-systems",
            ",".join(LLM_SYSTEMS),
            "--out",
            str(out),
            "--cache-dir",
            env_cache,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, f"bench --smoke failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}, out


def test_every_scenario_wrote_results_with_the_machine(smoke_results):
    results, out = smoke_results
    assert set(results) == set(SCENARIOS)
    for result in results.values():
        machine = result["machine"]
        assert machine["cores"] >= 1 and machine["versions"]["mlx-lm"] and machine["versions"]["ray"]
    assert (out / "llm.png").stat().st_size > 1000  # matplotlib is a test dependency too


def test_llm_systems_did_equal_work_side_by_side(smoke_results):
    llm = smoke_results[0]["llm"]
    assert llm["systems"] == LLM_SYSTEMS
    for system in llm["systems"]:
        for c in llm["concurrency"]:
            m = llm["results"][system][str(c)]
            assert m["tokens_per_s"] > 0 and m["ttft_p50_ms"] > 0 and m["itl_p50_ms"] > 0
    assert set(llm["targets"]) >= {"batching_speedup_at_max_concurrency"}


def test_asr_modes_heard_the_same(smoke_results):
    asr = smoke_results[0]["asr"]
    assert asr["transcripts_identical"] and not asr["failed"]
    assert all(len(texts) == 1 and texts[0] for texts in asr["transcripts"].values())
    assert {m: r["x_real_time"] > 0 for m, r in asr["results"].items()} == {"off": True, "offline": True}
