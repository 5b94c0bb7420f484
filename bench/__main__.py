"""Run the benchmarks: `python -m bench [--quick | --smoke] [--scenarios llm,asr,tts,memory]`.

Each scenario writes <out>/<scenario>.json (with the machine's description) and a PNG next to
it, and prints its table. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("llm", "asr", "tts", "memory")  # the default set
# On request: what the remote-CUDA route adds (no model); what the LLM prefix cache saves, and its
# disk tier across a replica restart; what
# affinity routing saves on two LLM replicas; Kokoro's CPU convolutions (in process: stock vs
# GEMM kernels vs onnxruntime); the shipped config's replica footprint, its sustained TTS burst
# and a replica's cold start; diarization quality (DER) on Kokoro dialogues, in process; streaming
# transcription sessions (chunk round trip, end of speech to final); embeddings batched vs one at
# a time vs in process; the voice agent's time to first audio, pipelined vs sequential; which VAD
# cuts long files into windows best (WER, clean and noisy), in process; chat latency alone and
# beside ASR, TTS and image work, the graph against one server per modality; ASR against
# faster-whisper at 1/4/16 clients with the in-process CPU time and per-op profile of one request.
# Kokoro speech against mlx_audio.server on the same directory (time to first audio, RTF, 1 and 4
# at once). Constrained decoding's cost: tok/s with a JSON schema and without, in process, and
# what check-and-retry costs. JSONSchemaBench's real schemas on the graph, from a local clone
# (--data DIR): coverage, answers invalid, beside what llguidance alone compiles. LoRA adapters
# mixed in one batch against the base alone and mlx_lm.server switching adapters. Kokoro's speech
# in every response format: when the first byte leaves (streamed, or encoded whole), in process.
EXTRA_SCENARIOS = (
    "cuda_proxy",
    "prefix",
    "restart",
    "affinity",
    "kokoro",
    "footprint",
    "burst",
    "coldstart",
    "diarization",
    "asr_stream",
    "embeddings",
    "agent",
    "vad",
    "mixed",
    "asr_peers",
    "tts_peers",
    "structured",
    "engine",
    "speculative",
    "sharded",
    "jsonschemabench",
    "lora",
    "speech_formats",
)
PRESETS = {  # LLM concurrency, repeats, tokens per request; ASR/TTS rounds, utterances per ASR client
    "full": {"concurrency": [1, 4, 16, 32], "repeats": 3, "tokens": 64, "asr_rounds": 3, "asr_utterances": 2},
    "quick": {"concurrency": [1, 16], "repeats": 1, "tokens": 32, "asr_rounds": 1, "asr_utterances": 1},
    "smoke": {"concurrency": [1, 2], "repeats": 1, "tokens": 6, "asr_rounds": 1, "asr_utterances": 1},
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="fewer levels and repeats (a few minutes)")
    size.add_argument("--smoke", action="store_true", help="tiny model and sizes (seconds; the test suite's)")
    p.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ",".join(SCENARIOS + EXTRA_SCENARIOS)
    )
    p.add_argument(
        "--llm-systems",
        default="graph,mlx_lm_server,in_process,graph_no_batching",
        help="comma-separated, from: graph, mlx_lm_server, in_process, graph_no_batching, graph_per_core, "
        "mlx_lm_server_all_cores (the last two: each system in its best configuration, bench/llm.py)",
    )
    p.add_argument(
        "--llm-model",
        default=None,
        help="serve this model (built-in id, directory, repo id) instead of the random benchmark model; "
        "a real model can end with EOS, which mlx_lm.server does not ignore: leave it out",
    )
    p.add_argument(
        "--llm-form",
        default="float32",
        choices=("float32", "bfloat16", "4bit"),
        help="the benchmark model's checkpoint form: every system serves the same directory, each in its "
        "best configuration (the graph applies its CPU dtype policy, llm.cpu_dtype)",
    )
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--tokens", type=int, default=None, help="generated tokens per LLM request")
    p.add_argument(
        "--data", type=Path, default=None, help="jsonschemabench: a local clone of guidance-ai/jsonschemabench"
    )
    p.add_argument("--schemas", type=int, default=300, help="jsonschemabench: how many of its schemas to sample")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)
    preset = PRESETS["smoke" if opts.smoke else "quick" if opts.quick else "full"]
    opts.preset = "smoke" if opts.smoke else "quick" if opts.quick else "full"
    for key in ("concurrency", "repeats", "tokens"):
        if getattr(opts, key) is None:
            setattr(opts, key, preset[key])
    opts.asr_rounds, opts.asr_utterances = preset["asr_rounds"], preset["asr_utterances"]
    opts.scenarios = [s.strip() for s in opts.scenarios.split(",") if s.strip()]
    unknown = set(opts.scenarios) - set(SCENARIOS) - set(EXTRA_SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    opts.llm_systems = [s.strip() for s in opts.llm_systems.split(",") if s.strip()]
    from bench.llm import SYSTEMS as LLM_SYSTEMS

    unknown = set(opts.llm_systems) - set(LLM_SYSTEMS)
    if unknown:
        p.error(f"unknown LLM systems: {', '.join(sorted(unknown))} (known: {', '.join(LLM_SYSTEMS)})")
    return opts


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


async def _run(opts, argv) -> int:
    from bench.cluster import BenchCluster
    from bench.report import write_result

    modules = {name: importlib.import_module(f"bench.{name}") for name in opts.scenarios}
    failed = []
    started = time.perf_counter()
    # A scenario that runs in process says so (NEEDS_CLUSTER = False): alone, it gets no Ray.
    needs_cluster = any(getattr(m, "NEEDS_CLUSTER", True) for m in modules.values())
    cluster_context = BenchCluster(opts.cache_dir) if needs_cluster else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="ominix-bench-") as work, cluster_context as cluster:
        where = f"Ray and Serve up on port {cluster.port}" if cluster is not None else "in process, no Ray"
        progress(f"{where}; scenarios: {', '.join(opts.scenarios)} ({opts.preset})")
        for name in opts.scenarios:
            module = modules[name]
            t0 = time.perf_counter()
            load_before = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
            try:
                result = await module.run(cluster, opts.cache_dir, Path(work), opts, progress)
            except Exception as e:
                progress(f"{name}: FAILED: {type(e).__name__}: {e}")
                failed.append(name)
                continue
            result = {
                "preset": opts.preset,
                "command": " ".join(["python -m bench", *(argv or [])]),
                "duration_s": time.perf_counter() - t0,
                "load_average_before": load_before,
                **result,
            }
            path = write_result(opts.out, name, result)
            png = module.plot(result, opts.out / f"{name}.png")
            rendered = module.render(result)
            (opts.out / f"{name}.md").write_text(
                rendered + "\n"
            )  # docs/performance.md's tables (python -m bench.readme)
            print(f"\n## {name}\n\n{rendered}\n\n{path}" + (f"\n{png}" if png else "") + "\n", flush=True)
            if result.get("failed"):
                failed.append(name)
    progress(f"done in {time.perf_counter() - started:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    sys.path.insert(0, str(ROOT))
    # bench/tts.py sets metrics_interval_s, which Ray 2.60 calls deprecated for env vars it does
    # not read yet: the warning would repeat on every serve.status().
    warnings.filterwarnings("ignore", message="The `metrics_interval_s` field", category=DeprecationWarning)
    argv = sys.argv[1:] if argv is None else argv
    return asyncio.run(_run(parse_args(argv), argv))


if __name__ == "__main__":
    sys.exit(main())
