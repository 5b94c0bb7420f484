"""TTS slot metrics: characters in, audio seconds out, time to first audio, real-time factor,
per model. Prometheus: ray_ominix_tts_*.

`SynthesisMeter` follows one synthesis; a stream that is cancelled or fails still counts the
audio it produced (that audio was sent), and counts as a request.
"""

from __future__ import annotations

import time
from typing import Optional

from deployments.metrics import RTF_BOUNDARIES, Counter, Histogram, ModelMetrics

TTS_METRICS = {
    "requests": Counter("ominix_tts_requests", "Syntheses finished (completed, failed or cancelled)"),
    "characters": Counter("ominix_tts_characters", "Characters of input text synthesized"),
    "audio_seconds": Counter("ominix_tts_audio_seconds", "Seconds of audio generated"),
    "ttfa": Histogram("ominix_tts_time_to_first_audio_ms", "Time from the request to its first audio samples"),
    "rtf": Histogram(
        "ominix_tts_real_time_factor",
        "Time from the request to its last audio samples over the audio's duration (below 1: faster than real time)",
        unit="ratio",
        boundaries=RTF_BOUNDARIES,
    ),
}


class SpeechMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(TTS_METRICS)

    def meter(self, model: str, characters: int, sample_rate: int, started: float) -> SynthesisMeter:
        """`started`: the request's `time.perf_counter()` on arrival (time to first audio counts from it)."""
        return SynthesisMeter(self, model, characters, sample_rate, started)


class SynthesisMeter:
    def __init__(self, metrics: SpeechMetrics, model: str, characters: int, sample_rate: int, started: float):
        self.metrics, self.model, self.characters, self.sample_rate = metrics, model, characters, sample_rate
        self.started = started
        self.samples = 0
        self.first_audio_at: Optional[float] = None
        self.last_audio_at: Optional[float] = None

    def audio(self, samples: int) -> None:
        if not samples:
            return
        self.last_audio_at = time.perf_counter()
        if self.first_audio_at is None:
            self.first_audio_at = self.last_audio_at
            self.metrics.observe(self.model, "ttfa", (self.first_audio_at - self.started) * 1000)
        self.samples += samples

    def done(self) -> None:
        audio_seconds = self.samples / self.sample_rate
        self.metrics.add(self.model, "requests")
        self.metrics.add(self.model, "characters", self.characters)
        self.metrics.add(self.model, "audio_seconds", audio_seconds)
        if self.last_audio_at is not None:
            self.metrics.observe(self.model, "rtf", (self.last_audio_at - self.started) / audio_seconds)
