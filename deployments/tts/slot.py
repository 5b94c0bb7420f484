"""The TTS slot's entry in the slot registry (deployments/slots.py)."""

from __future__ import annotations

from deployments.resources import MiB, reserve
from deployments.slot_types import Engine, Route, Slot
from deployments.tts.config import TTSSlotConfig
from deployments.tts.kokoro import KOKORO_TTS_ID, ensure_kokoro
from deployments.tts.tiny_model import TINY_TTS_ID, ensure_tiny_tts

SLOT = Slot(
    name="tts",
    deployment_name="TTS",
    deployment="deployments.tts.deployment:TTSSlot",
    config=TTSSlotConfig,
    builtins={TINY_TTS_ID: ensure_tiny_tts, KOKORO_TTS_ID: ensure_kokoro},
    replica_resources=reserve(0.1, 2304),  # Kokoro: 0.9-1.2 GiB peak, 2.1 GiB on a 28 s sentence
    random_builtins=frozenset({TINY_TTS_ID}),
    real_model_hint=f"TTS_MODEL={KOKORO_TTS_ID} (real Kokoro-82M, converted offline)",
    routes=(
        Route("/v1/audio/speech", 10 * MiB, 600.0),
        Route("/v1/audio/speech/clone", 10 * MiB, 600.0),
        Route("/v1/audio/tts/", 10 * MiB, 600.0, card=False),  # OminiX-API's per-family routes
        Route("/ws/v1/tts", 1 * MiB, None),  # WebSockets have their own idle timeout
        Route("/v1/voices/train/progress", 64 * 1024, None, card=False),  # SSE, as long as the job
        Route("/v1/voices/train", 50 * MiB, 60.0, card=False),  # OminiX-API's cap
        Route("/v1/voices", 10 * MiB, 60.0, card=False),
    ),
    model_types=frozenset(
        {"pocket_tts", "kokoro", "qwen3_tts", "kitten_tts", "sesame", "dia", "outetts", "spark", "csm"}
    ),
    engine=Engine(
        "mlx-audio-tts",
        "mlx-audio",
        "Text to speech (mlx-audio TTS models)",
        ("streaming", "voice_cloning", "websocket", "preset_voices"),
    ),
)
