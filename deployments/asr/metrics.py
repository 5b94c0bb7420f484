"""ASR slot metrics: audio seconds transcribed, requests and their latency in the slot
(decoding, batching and transcription), per model. Prometheus: ray_ominix_asr_*."""

from __future__ import annotations

from deployments.metrics import Counter, Histogram, ModelMetrics

ASR_METRICS = {
    "requests": Counter("ominix_asr_requests", "Transcriptions finished"),
    "audio_seconds": Counter("ominix_asr_audio_seconds", "Seconds of audio transcribed"),
    "latency": Histogram("ominix_asr_latency_ms", "Transcription time in the ASR slot (decode, batch, model)"),
}


class TranscriptionMetrics(ModelMetrics):
    def __init__(self):
        super().__init__(ASR_METRICS)

    def transcribed(self, model: str, audio_seconds: float, seconds: float) -> None:
        self.add(model, "requests")
        self.add(model, "audio_seconds", audio_seconds)
        self.observe(model, "latency", seconds * 1000)
