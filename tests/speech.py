"""Test helpers for audio: real speech from espeak-ng, audio containers via soundfile/ffmpeg,
and a word error rate. espeak-ng and ffmpeg are installed by .ci/run."""

from __future__ import annotations

import io
import re
import shutil
import subprocess

import numpy as np
import soundfile as sf


def speak(text: str, rate: int = 16000, voice: str | None = None) -> np.ndarray:
    """`text` spoken by espeak-ng (in `voice`, e.g. "en-us+m3", "en+f4"), as mono float32 at `rate` Hz."""
    from deployments.audio.decode import decode_audio

    assert shutil.which("espeak-ng"), "espeak-ng is required (apt-get install espeak-ng; see .ci/run)"
    args = ["espeak-ng", "--stdout", *(["-v", voice] if voice else []), text]
    wav = subprocess.run(args, check=True, capture_output=True).stdout
    return decode_audio(wav, rate)


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.float32)


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """Audio bytes in a container: wav/flac/ogg/mp3 through soundfile, others through ffmpeg."""
    if fmt in ("wav", "flac", "ogg", "mp3"):
        buf = io.BytesIO()
        sf.write(buf, samples, rate, format=fmt.upper())
        return buf.getvalue()
    assert shutil.which("ffmpeg"), "ffmpeg is required (see .ci/run)"
    wav = encode(samples, rate, "wav")
    codec = {"m4a": ["-c:a", "aac", "-f", "ipod"], "webm": ["-c:a", "libopus", "-f", "webm"]}[fmt]
    # ipod (m4a) needs a seekable output; the test writes to stdout as fragmented MP4.
    extra = ["-movflags", "frag_keyframe+empty_moov"] if fmt == "m4a" else []
    cmd = ["ffmpeg", "-nostdin", "-loglevel", "error", "-i", "pipe:0", *codec, *extra, "pipe:1"]
    return subprocess.run(cmd, input=wav, check=True, capture_output=True).stdout


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, by edit distance."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


LONG_SENTENCES = (
    "Please schedule the meeting for Tuesday afternoon.",
    "The weather today is cold and windy.",
    "We need more coffee in the kitchen.",
    "The train leaves the station at noon.",
    "My brother plays the guitar every evening.",
    "Read the report before the next call.",
    "The garden is full of yellow flowers.",
    "Send the invoice to the finance team.",
)


def long_recording(seconds: float, rate: int = 16000) -> tuple[np.ndarray, list[tuple[str, float, float]]]:
    """LONG_SENTENCES in turn, with pauses of 0.6-1.6 s, for at least `seconds`: the audio and
    each sentence's (text, start s, end s). The ASR tests' and bench's long recording."""
    spoken = {text: speak(text, rate) for text in LONG_SENTENCES}
    pieces, spans, t, k = [], [], 0.0, 0
    while t < seconds:
        text = LONG_SENTENCES[k % len(LONG_SENTENCES)]
        gap = silence(0.6 + 0.5 * (k % 3), rate)
        pieces += [spoken[text], gap]
        spans.append((text, t, t + len(spoken[text]) / rate))
        t += (len(spoken[text]) + len(gap)) / rate
        k += 1
    return np.concatenate(pieces), spans
