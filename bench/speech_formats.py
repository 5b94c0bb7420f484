"""Speech response formats: when the first byte leaves, per format, in process.

`python -m bench.speech_formats [--repeats N]` (or `python -m bench --scenarios speech_formats`):
Kokoro-82M (the shipped TTS model) speaks the same three sentences, and the ingress's
`audio_response` (deployments/ingress/serving/speech.py) answers it in every response format,
consumed as a client reads a streamed body. Beside them, `mp3 (whole)`: the same audio encoded
when synthesis ends, as every compressed format was answered before mp3, opus and aac streamed
(deployments/audio/encode.py). Per format: time to the first body byte, time to the last, bytes
and bitrate; medians over the repeats, the formats in a rotated order each repeat.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from bench.report import run_alone, saved, table
from bench.stats import median, ratio

ROOT = Path(__file__).resolve().parents[1]
NEEDS_CLUSTER = False  # in process: `python -m bench` starts no Ray for it alone
TEXT = (
    "Please schedule the meeting for Tuesday afternoon. "
    "The quick brown fox jumps over the lazy dog. "
    "Thank you for calling, and have a wonderful day."
)
VOICE = "af_heart"
WHOLE_MP3 = "mp3 (whole)"


class EngineSpeech:
    """What `audio_response` reads (a SpeechStream's `sample_rate` and `audio()`), from the
    engine directly: the slot's segments, without Ray between."""

    def __init__(self, engine, segments: list[str]):
        self.engine, self.segments = engine, segments
        self.sample_rate = engine.sample_rate

    async def audio(self):
        from deployments.tts.engine import SpeechJob

        async for samples in self.engine.synthesize(SpeechJob(segments=self.segments, preset=VOICE)):
            yield samples


async def answer(engine, segments: list[str], fmt: str) -> dict:
    """One request's body read to its end: first and last byte times, bytes, audio seconds."""
    from deployments.audio.encode import encode
    from deployments.ingress.serving.speech import audio_response

    started, first, size, samples = time.perf_counter(), None, 0, 0
    speech = EngineSpeech(engine, segments)
    if fmt == WHOLE_MP3:
        chunks = [c async for c in speech.audio()]
        audio = np.concatenate(chunks)
        body, samples = encode(audio, speech.sample_rate, "mp3"), audio.size
        first = time.perf_counter()
        size = len(body)
    else:
        response = await audio_response(speech, fmt)
        parts = getattr(response, "body_iterator", None)
        if parts is None:  # a whole file
            first, size = time.perf_counter(), len(response.body)
        else:
            async for part in parts:
                if part and first is None:
                    first = time.perf_counter()
                size += len(part)
    done = time.perf_counter()
    return {"first_byte_s": first - started, "last_byte_s": done - started, "bytes": size, "samples": samples}


def formats() -> list[str]:
    from deployments.audio.encode import FORMATS

    present = [f for f in FORMATS if f != "aac" or shutil.which("ffmpeg")]
    return [*present, WHOLE_MP3]


async def measure(cache_dir: Path, repeats: int, progress) -> dict:
    from deployments.tts import kokoro
    from deployments.tts.engine import TTSEngine
    from deployments.tts.sentences import split_sentences

    engine = await TTSEngine.start(kokoro.KOKORO_TTS_ID, kokoro.ensure_kokoro(cache_dir))
    try:
        segments = split_sentences(TEXT)
        await answer(engine, segments[:1], "pcm")  # warm: G2P, the kernels' first shapes
        names = formats()
        runs: dict[str, list[dict]] = {f: [] for f in names}
        for r in range(repeats):
            for fmt in names[r % len(names) :] + names[: r % len(names)]:
                runs[fmt].append(await answer(engine, segments, fmt))
            progress(
                f"repeat {r + 1}/{repeats}: " + ", ".join(f"{f} {runs[f][-1]['first_byte_s']:.2f} s" for f in names)
            )
        audio_s = runs[WHOLE_MP3][0]["samples"] / engine.sample_rate
    finally:
        engine.shutdown()
    results = {}
    for fmt, measured in runs.items():
        first, last = median(m["first_byte_s"] for m in measured), median(m["last_byte_s"] for m in measured)
        size = median(m["bytes"] for m in measured)
        results[fmt] = {
            "first_byte_ms": first * 1000,
            "last_byte_ms": last * 1000,
            "bytes": size,
            "kbit_per_s": size * 8 / 1000 / audio_s if audio_s else None,
        }
    whole = results[WHOLE_MP3]["first_byte_ms"]
    for fmt in results:
        results[fmt]["first_byte_vs_whole_mp3"] = ratio(whole, results[fmt]["first_byte_ms"])
    return {
        "text": TEXT,
        "voice": VOICE,
        "segments": len(segments),
        "audio_s": audio_s,
        "repeats": repeats,
        "results": results,
    }


async def run(cluster, cache_dir: Path, work: Path, opts, progress) -> dict:
    return await measure(cache_dir, 1 if opts.preset == "smoke" else 3, progress)


def render(result: dict) -> str:
    rows = [
        [fmt, m["first_byte_ms"], m["last_byte_ms"], m["first_byte_vs_whole_mp3"], m["bytes"], m["kbit_per_s"]]
        for fmt, m in result["results"].items()
    ]
    head = ["format", "first byte ms", "last byte ms", "first byte, x sooner than mp3 (whole)", "bytes", "kbit/s"]
    return table(head, rows) + (
        f"\n\nKokoro-82M, voice {result['voice']}, {result['segments']} sentences, {result['audio_s']:.1f} s of audio; "
        f"median of {result['repeats']}."
    )


def plot(result: dict, path: Path) -> Optional[Path]:
    from bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return None
    names = list(result["results"])
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [result["results"][n]["first_byte_ms"] for n in names], width=0.4, label="first byte")
    ax.bar([i + 0.2 for i in x], [result["results"][n]["last_byte_ms"] for n in names], width=0.4, label="last byte")
    ax.set_xticks(list(x), names, fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title(f"Kokoro speech by response format ({result['audio_s']:.1f} s of audio)")
    ax.legend(fontsize=8)
    return saved(plt, fig, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.speech_formats", description=__doc__)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/ominix-serve").expanduser())
    opts = p.parse_args(argv)

    def run_it(progress, work):
        return measure(opts.cache_dir, opts.repeats, progress)

    return run_alone(sys.modules[__name__], "speech_formats", run_it, opts.out, argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
