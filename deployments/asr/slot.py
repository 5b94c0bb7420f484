"""The ASR slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.asr.config import ASRSlotConfig
from deployments.asr.tiny_model import TINY_WHISPER_ID, ensure_tiny_whisper
from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en
from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot

SLOT = Slot(
    name="asr",
    deployment_name="ASR",
    deployment="deployments.asr.deployment:ASRSlot",
    config=ASRSlotConfig,
    builtins={WHISPER_TINY_EN_ID: ensure_whisper_tiny_en, TINY_WHISPER_ID: ensure_tiny_whisper},
    random_builtins=frozenset({TINY_WHISPER_ID}),
    replica_resources=reserve(0.1, 1024),
    real_model_hint="the built-in whisper-tiny.en (the default)",
    routes=(
        Route("/v1/audio/transcriptions", 10 * MiB, 1800.0),
        Route("/v1/audio/diarization", 10 * MiB, 1800.0),
        Route("/v1/audio/translations", 10 * MiB, 1800.0),
        # Streaming sessions: one PCM chunk per request (at most stream_max_chunk_s).
        Route("/v1/audio/stream/", 2 * MiB, 300.0, card=False),
        Route("/v1/realtime", 1 * MiB, None, card=False),  # a WebSocket: its own idle timeout
        Route("/v1/audio/asr/", 10 * MiB, 1800.0, card=False),  # OminiX-API's per-family routes
    ),
    system_tools=("ffmpeg",),  # uploads other than WAV/FLAC/OGG/MP3 (deployments/audio/decode.py)
    model_types=frozenset({"whisper", "qwen3_asr", "parakeet", "sensevoice", "fireredasr2", "voxtral", "lasr_ctc"}),
    engine=Engine(
        "mlx-audio-stt",
        "mlx-audio",
        "Speech to text (Whisper and mlx-audio STT models)",
        ("transcription", "timestamps", "batching", "vad", "multilingual", "diarization"),
    ),
)
