"""The benchmark harness at smoke size (`python -m bench --smoke`): every scenario runs end to
end on its own private Ray cluster and writes its JSON, so the harness cannot rot. No timing
is asserted: only that the work was done, equal, and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smoke_results(tmp_path_factory, cache_dir):
    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en
    from deployments.llm.smollm2 import ensure_smollm2
    from deployments.tts.kokoro import ensure_kokoro

    out = tmp_path_factory.mktemp("bench-results")
    env_cache = str(cache_dir)  # the session's model cache: each real model is converted once
    # Converted before the graphs start, as a running server's cache holds them: `footprint`
    # measures replicas at rest and in use, and a first start's conversion inside the TTS
    # replica peaks above what the replica reserves (the smoke runs beside the in-process
    # tests, on a cache of its own, before the e2e graph has converted anything).
    for ensure in (ensure_kokoro, ensure_whisper_tiny_en, ensure_smollm2):
        ensure(cache_dir)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--scenarios",
            "llm,asr,tts,memory,prefix,footprint,burst,coldstart,agent,mixed",
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
    assert set(results) == {
        "llm",
        "asr",
        "tts",
        "memory",
        "prefix",
        "footprint",
        "burst",
        "coldstart",
        "agent",
        "mixed",
    }
    for result in results.values():
        machine = result["machine"]
        assert machine["cores"] >= 1 and machine["versions"]["mlx-lm"] and machine["versions"]["ray"]
    assert (out / "llm.png").stat().st_size > 1000  # matplotlib is a test dependency too


def test_llm_systems_did_equal_work_side_by_side(smoke_results):
    llm = smoke_results[0]["llm"]
    assert llm["systems"] == ["graph", "mlx_lm_server", "in_process", "graph_no_batching"]
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


def test_tts_burst_and_replica_timeline(smoke_results):
    tts = smoke_results[0]["tts"]
    assert not tts["failed"] and len(tts["audio_bytes_per_request"]) == 1
    assert all(tts["replica_timeline"][v] for v in ("autoscaling", "single_replica"))


def test_memory_cycle_frees_the_model(smoke_results):
    stages = smoke_results[0]["memory"]["slots"]["llm"]["stages"]
    assert stages["loaded_at_start"]["mlx_active_bytes"] > 0
    assert stages["unloaded"]["mlx_active_bytes"] < stages["loaded_at_start"]["mlx_active_bytes"]
    assert stages["loaded_again"]["rss_bytes"] > 0


def test_the_prefix_cache_is_reported_reused_by_the_graph_and_not_when_off(smoke_results):
    prefix = smoke_results[0]["prefix"]["results"]
    assert set(prefix) == {"graph", "graph_no_prefix_cache", "mlx_lm_server"}
    for m in prefix.values():
        assert m["shared_system_prompt_ttft_p50_ms"] > 0 and m["second_turn_ttft_p50_ms"] > 0
    # The second turn resends the first turn and its answer: the graph reuses them, the same
    # graph with the cache off reuses nothing.
    assert (
        prefix["graph"]["second_turn_cached_tokens_mean"]
        > prefix["graph"]["shared_system_prompt_cached_tokens_mean"]
        > 0
    )
    assert prefix["graph_no_prefix_cache"]["second_turn_cached_tokens_mean"] == 0


def test_footprint_reads_every_replica_of_the_shipped_config(smoke_results):
    replicas = smoke_results[0]["footprint"]["replicas"]
    from deployments.slots import SLOTS

    assert set(replicas) == {"Ingress", "Control", *(slot.deployment_name for slot in SLOTS.values())}
    assert all(r["peak_rss_bytes"] >= r["idle_rss_bytes"] > 0 and r["fits"] for r in replicas.values())


def test_sustained_burst_compares_autoscaling_with_one_replica(smoke_results):
    burst = smoke_results[0]["burst"]
    assert not burst["failed"] and set(burst["results"]) == {"autoscaling", "one_replica"}
    assert all(r["requests"] > 0 and r["buckets"] for r in burst["results"].values())
    assert burst["results"]["one_replica"]["peak_replicas"] == 1


def test_cold_start_is_broken_down(smoke_results):
    cold = smoke_results[0]["coldstart"]
    steps = cold["steps"]
    assert steps["model_load_s"] > 0 and steps["steps_total_s"] >= steps["worker_start_s"]
    assert cold["replica"]["load_to_running_s"] >= cold["replica"]["starting_to_running_s"] > 0
    assert cold["import_profile"]


def test_the_agent_is_timed_pipelined_and_sequential_on_the_same_answer(smoke_results):
    agent = smoke_results[0]["agent"]
    assert agent["same_answer"] and not agent["failed"]
    for way in ("pipelined", "sequential"):
        assert agent["results"][way]["ttfa_p50_ms"] > 0 and agent["results"][way]["audio_s_mean"] > 0


def test_mixed_load_times_chat_alone_and_beside_the_other_modalities(smoke_results):
    mixed = smoke_results[0]["mixed"]
    assert set(mixed["results"]) == {"graph", "separate_servers"}
    # Every background kind answered its warm-up request on both systems (mlx_audio.server's
    # transcription and speech routes included: bench/mlx_audio_cpu.py), with no error after.
    assert mixed["unavailable"] == {"graph": {}, "separate_servers": {}} and not mixed["failed"]
    for r in mixed["results"].values():
        for load in ("alone", "mixed"):
            assert r[load]["requests"] > 0 and r[load]["ttft_p50_ms"] > 0 and r[load]["itl_p50_ms"] > 0
        assert set(r["mixed"]["background_completed"]) >= {"asr", "tts"}
    assert set(mixed["results"]["graph"]["mixed"]["background_completed"]) == {"asr", "tts", "image"}
