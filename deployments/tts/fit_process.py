"""Kokoro voice fitting in a child process of the TTS replica.

A fitting step is one MLX forward and backward pass through Kokoro (~40 s of CPU on a 2-core
box) that nothing can interrupt; run on the replica's engine thread it held every synthesis of
that replica and a cancelled job's step ran to its end. In a process of its own the fit is
stopped at once (the process is killed when its stream is closed: the caller left or the job
was cancelled), and the replica's engine thread keeps speaking while it fits.

The replica side (`fit_in_child`) writes the job into a temporary directory (the reference as
.npy, the options as JSON), starts `python -m deployments.tts.fit_process <dir>` and relays its
events, one JSON object per stdout line: {"scored", "of"} per stock voice scored, {"step",
"loss", "seconds"} per step, then the result, whose "pack" (the fitted voice pack) the child
saves as a file next to the job. The child loads the model as the engine does
(`model_hooks`), so it runs the same CPU kernels and G2P. No Ray here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.protocol.errors import server_error

# Where `deployments` is imported from, for the child (the replica may run from a source tree).
_SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


async def fit_in_child(
    model_dir: Path,
    audio: np.ndarray,
    steps: int,
    language: Optional[str] = None,
    stock_cache: Optional[Path] = None,
    base_voices: Optional[list[str]] = None,
) -> AsyncIterator[dict[str, Any]]:
    """The fit's events (the last one with the pack as an array). Closing the iterator kills
    the child at once, whatever it is computing."""
    work = Path(tempfile.mkdtemp(prefix="ominix-fit-"))
    process = None
    try:
        np.save(work / "reference.npy", np.asarray(audio, dtype=np.float32))
        job = {
            "model_dir": str(model_dir),
            "steps": steps,
            "language": language,
            "stock_cache": str(stock_cache) if stock_cache else None,
            "base_voices": base_voices,
        }
        (work / "job.json").write_text(json.dumps(job))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_SOURCE_ROOT, os.environ.get("PYTHONPATH")]))}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "deployments.tts.fit_process", str(work), stdout=asyncio.subprocess.PIPE, env=env
        )
        async for line in process.stdout:
            event = json.loads(line)
            if "error" in event:
                raise server_error(f"Voice fitting failed: {event['error']}")
            if "pack" in event:
                event["pack"] = np.load(event["pack"])
            yield event
        if await process.wait() != 0:
            raise server_error(f"Voice fitting failed: its process exited with {process.returncode}")
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        shutil.rmtree(work, ignore_errors=True)


def fit_events(model, model_dir: Path, audio: np.ndarray, job: dict) -> Iterator[dict[str, Any]]:
    """The fit itself (kokoro_fit.KokoroVoiceFit), as events; runs in the child."""
    from deployments.audio_models.speaker_encoder import default_encoder
    from deployments.tts import kokoro_fit, model_hooks

    packs = kokoro_fit.load_packs(model_dir / "voices")
    if job["base_voices"]:
        packs = {name: pack for name, pack in packs.items() if name in job["base_voices"]}
    lang = model_hooks.kokoro_lang_code(job["language"], None)
    fit = kokoro_fit.KokoroVoiceFit(model, default_encoder(), packs, audio, lang_code=lang)
    cache = Path(job["stock_cache"]) if job["stock_cache"] else None
    stock = kokoro_fit.read_stock_cache(cache, fit.key)
    known = len(stock)
    for i in fit.score_stock(stock):
        yield {"scored": i + 1, "of": len(fit.names)}
    if len(stock) > known and cache is not None:  # the next job skips the scoring
        kokoro_fit.write_stock_cache(cache, fit.key, stock)
    nearest = fit.start()
    start = fit.similarity()
    for step in fit.steps(job["steps"]):
        yield {"step": step.step, "loss": round(step.loss, 5), "seconds": round(step.seconds, 2)}
    yield {
        "pack": fit.pack(),
        "nearest_voice": nearest,
        "nearest_similarity": round(fit.stock_similarity[nearest], 4),
        "start_similarity": round(start, 4),
        "similarity": round(fit.similarity(), 4),
        "weights": fit.weights(),
    }


def main(work: Path) -> int:
    # Events go to the real stdout; anything a library prints goes to stderr (the replica's log).
    events = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        from deployments import blas

        blas.select()
        from mlx_audio.tts.utils import load_model

        from deployments.tts import model_hooks

        job = json.loads((work / "job.json").read_text())
        model_dir = Path(job["model_dir"])
        model_hooks.before_load(model_dir)
        model = load_model(model_dir)
        model_hooks.after_load(model, "kokoro")
        for event in fit_events(model, model_dir, np.load(work / "reference.npy"), job):
            if "pack" in event:
                np.save(work / "pack.npy", event["pack"])
                event["pack"] = str(work / "pack.npy")
            events.write(json.dumps(event) + "\n")
            events.flush()
    except Exception as e:  # reported to the replica as one event, with the traceback in the log
        import traceback

        traceback.print_exc()
        events.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        events.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
