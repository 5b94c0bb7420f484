"""ASR slot metrics: audio seconds transcribed, requests, their latency in the slot
(decoding, batching and transcription) and real-time factor, and the live streaming sessions,
per model. Prometheus: ray_ominix_asr_*."""

from __future__ import annotations

from deployments.metrics import RTF_BOUNDARIES, Counter, Gauge, Histogram, ModelMetrics

ASR_METRICS = {
    "requests": Counter("ominix_asr_requests", "Transcriptions finished"),
    "audio_seconds": Counter("ominix_asr_audio_seconds", "Seconds of audio transcribed"),
    "latency": Histogram("ominix_asr_latency_ms", "Transcription time in the ASR slot (decode, batch, model)"),
    "rtf": Histogram(
        "ominix_asr_real_time_factor",
        "Transcription time in the slot over the audio's duration (below 1: faster than real time)",
        unit="ratio",
        boundaries=RTF_BOUNDARIES,
    ),
    "live_sessions": Gauge("ominix_asr_live_sessions", "Streaming transcription sessions open on the replica"),
}


class TranscriptionMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(ASR_METRICS)

    def transcribed(self, model: str, audio_seconds: float, seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "audio_seconds", audio_seconds)
        self.observe(model, "latency", seconds * 1000)
        if audio_seconds > 0:
            self.observe(model, "rtf", seconds / audio_seconds)

    def live_sessions(self, loaded: list[str], sessions_by_model: dict[str, int]) -> None:
        """Every loaded model's count (0 when it has none), any other model with sessions, and
        any model counted before (its count falls to 0 rather than staying at its last)."""
        counted = [m for m, t in self.totals.items() if "live_sessions" in t]
        for model in dict.fromkeys([*loaded, *sessions_by_model, *counted]):
            self.set(model, "live_sessions", sessions_by_model.get(model, 0))
