"""The slot registry: the one list of the graph's model slots.

Each entry says everything the rest of the project needs to know about a slot: its name in the
graph args, the Serve deployment that runs it, its config model, its built-in models, the routes
it serves (with their body caps and timeouts), the engine package behind it and what it can do.
The graph builder binds from it, the ingress gets one handle per entry, and Control, the
catalog, /v1/version, /metrics and the route policies derive from it. Adding a slot is one
package under deployments/, one entry here and its routers (docs/architecture.md, "Adding a slot").

This module stays free of Ray and MLX: the deployment class is named by import path and loaded
only by the graph builder.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from deployments.asr.config import ASRSlotConfig
from deployments.asr.tiny_model import TINY_WHISPER_ID, ensure_tiny_whisper
from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en
from deployments.control.policy import SlotModelsConfig
from deployments.embeddings.config import EmbeddingsSlotConfig
from deployments.embeddings.minilm import MINILM_ID, ensure_minilm
from deployments.image.config import ImageSlotConfig
from deployments.image.tiny_model import TINY_IMAGE_ID, ensure_tiny_image
from deployments.llm.config import LLMSlotConfig
from deployments.llm.smollm2 import SMOLLM2_ID, ensure_smollm2
from deployments.llm.tiny_model import TINY_LLM_ID, ensure_tiny_llm
from deployments.resources import reserve
from deployments.tts.config import TTSSlotConfig
from deployments.tts.kokoro import KOKORO_TTS_ID, ensure_kokoro
from deployments.tts.tiny_model import TINY_TTS_ID, ensure_tiny_tts
from deployments.vlm.config import VLMSlotConfig
from deployments.vlm.tiny_model import TINY_VLM_ID, ensure_tiny_vlm

MiB = 1024 * 1024

# A built-in model: its id -> the function that generates or converts it into a cache dir.
Builtins = dict[str, Callable[..., Any]]


@dataclass(frozen=True)
class Engine:
    """The Python package that serves a slot, as /v1/version and app manifests see it."""

    name: str
    package: str  # the distribution whose installed version is the engine's version
    description: str
    capabilities: tuple[str, ...]


SERVE_DRAIN_DEFAULT_S = 20.0  # Serve's graceful_shutdown_timeout_s


@dataclass(frozen=True)
class Route:
    """A public route prefix of a slot, with what the ingress allows a request on it."""

    prefix: str
    max_body_bytes: int
    timeout_s: Optional[float]
    card: bool = True  # listed among the slot's endpoints in /v1/models


@dataclass(frozen=True)
class Slot:
    name: str  # the args block, the catalog's model_type, Control's and /metrics' key
    deployment_name: str  # the Serve deployment (serve_config.yaml `deployments:`, serve status)
    deployment: str  # "module:Class" of the deployment, imported only by the graph builder
    config: type[SlotModelsConfig]
    builtins: Builtins
    routes: tuple[Route, ...]
    engine: Engine
    # What one replica reserves from Ray: a small logical CPU share and memory sized from its
    # measured peak (docs/resources.md); serve_config.yaml repeats it, a unit test keeps them equal.
    replica_resources: dict = field(default_factory=lambda: reserve(0.1, 512))
    real_model_hint: str = ""  # shown when a built-in random-weight model serves
    random_builtins: frozenset[str] = field(default_factory=frozenset)
    repo_root_file: str = "config.json"  # every Hugging Face repo of the slot's format has it

    @property
    def label(self) -> str:
        """How messages name the slot: "LLM", "ASR", "TTS", "Image"."""
        return self.deployment_name

    def endpoints(self) -> list[str]:
        return [route.prefix for route in self.routes if route.card]

    def drain_timeout_s(self) -> float:
        """How long a replica that Serve stops (a scale-down, a redeploy) may finish the requests
        it holds: as long as the slot's longest route lets a request run. Serve's default, 20 s,
        cut syntheses and generations off mid-answer when the autoscaler chose a busy replica.
        WebSocket routes (no timeout) do not count: a socket outlives any one replica."""
        return max([SERVE_DRAIN_DEFAULT_S] + [r.timeout_s for r in self.routes if r.timeout_s is not None])

    def deployment_class(self) -> Any:
        module, _, name = self.deployment.partition(":")
        return getattr(importlib.import_module(module), name)


SLOTS: dict[str, Slot] = {
    slot.name: slot
    for slot in (
        Slot(
            name="llm",
            deployment_name="LLM",
            deployment="deployments.llm.deployment:LLMSlot",
            config=LLMSlotConfig,
            builtins={SMOLLM2_ID: ensure_smollm2, TINY_LLM_ID: ensure_tiny_llm},
            random_builtins=frozenset({TINY_LLM_ID}),
            replica_resources=reserve(0.1, 1024),  # SmolLM2 dense float32: 777 MiB peak
            real_model_hint=f"the default {SMOLLM2_ID}, or LLM_MODEL=mlx-community/Qwen3-0.6B-4bit on a Mac",
            routes=(
                Route("/v1/chat/completions", 20 * MiB, 300.0),
                Route("/v1/completions", 20 * MiB, 300.0),
                Route("/v1/responses", 20 * MiB, 300.0),
                Route("/v1/messages", 20 * MiB, 300.0),
            ),
            engine=Engine(
                "mlx-lm",
                "mlx-lm",
                "Chat and completions with continuous batching (mlx-lm BatchGenerator)",
                ("chat", "completions", "streaming", "continuous_batching", "tool_use", "thinking", "multiplexing"),
            ),
        ),
        Slot(
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
            engine=Engine(
                "mlx-audio-stt",
                "mlx-audio",
                "Speech to text (Whisper and mlx-audio STT models)",
                ("transcription", "timestamps", "batching", "vad", "multilingual", "diarization"),
            ),
        ),
        Slot(
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
            engine=Engine(
                "mlx-audio-tts",
                "mlx-audio",
                "Text to speech (mlx-audio TTS models)",
                ("streaming", "voice_cloning", "websocket", "preset_voices"),
            ),
        ),
        Slot(
            name="image",
            deployment_name="Image",
            deployment="deployments.image.deployment:ImageSlot",
            config=ImageSlotConfig,
            builtins={TINY_IMAGE_ID: ensure_tiny_image},
            random_builtins=frozenset({TINY_IMAGE_ID}),
            real_model_hint="IMAGE_MODEL=flux (on a Mac)",
            repo_root_file="model_index.json",  # diffusers layout (FLUX.2-klein, Z-Image)
            replica_resources=reserve(0.1, 2048),
            routes=(
                Route("/v1/images/generations", 10 * MiB, 600.0),
                Route("/v1/images/", 10 * MiB, 600.0, card=False),
                # Loads and rewrites a whole image model.
                Route("/v1/models/quantize", 64 * 1024, 600.0, card=False),
            ),
            engine=Engine(
                "mflux",
                "mflux",
                "Image generation (FLUX.2-klein via mflux)",
                ("text_to_image", "image_to_image", "quantization"),
            ),
        ),
        Slot(
            name="embeddings",
            deployment_name="Embeddings",
            deployment="deployments.embeddings.deployment:EmbeddingsSlot",
            config=EmbeddingsSlotConfig,
            builtins={MINILM_ID: ensure_minilm},
            # The logical CPU budget is spent by the four slots above at their max_replicas;
            # memory is what limits these replicas (docs/resources.md).
            replica_resources=reserve(0, 512),
            real_model_hint="the built-in ominix-all-minilm-l6-v2 (the default)",
            routes=(Route("/v1/embeddings", 10 * MiB, 120.0),),
            engine=Engine(
                "mlx-embeddings",
                "mlx-embeddings",
                "Text embeddings (mlx-embeddings: BERT-style sentence-transformers, Qwen3-Embedding, ...)",
                ("embeddings", "batching", "base64", "matryoshka"),
            ),
        ),
        Slot(
            name="vlm",
            deployment_name="VLM",
            deployment="deployments.vlm.deployment:VLMSlot",
            config=VLMSlotConfig,
            builtins={TINY_VLM_ID: ensure_tiny_vlm},
            random_builtins=frozenset({TINY_VLM_ID}),
            replica_resources=reserve(0, 512),  # as the embeddings slot: memory limits these
            real_model_hint="VLM_MODEL=mlx-community/Qwen2.5-VL-3B-Instruct-4bit (needs network once)",
            # Chat with images arrives on the LLM slot's /v1/chat/completions (its body cap).
            routes=(Route("/v1/vlm/completions", 20 * MiB, 300.0),),
            engine=Engine(
                "mlx-vlm",
                "mlx-vlm",
                "Vision-language chat (mlx-vlm: Qwen2-VL, Qwen2.5-VL, SmolVLM, ...)",
                ("vision", "chat", "streaming", "multiplexing"),
            ),
        ),
    )
}

# Routes that belong to no slot: model management, other WebSockets, everything else.
GENERAL_ROUTES = (
    Route("/v1/models/load", 64 * 1024, 300.0),
    Route("/v1/models/unload", 64 * 1024, 30.0),
    # The voice agent (LLM -> TTS): a whole answer spoken, as long as the slower of the two.
    Route("/v1/agent/stream", 1 * MiB, 600.0),
    Route("/v1/models/download/progress", 64 * 1024, None),  # an SSE stream as long as the download
    Route("/ws/", 1 * MiB, None),
    Route("", 1 * MiB, 60.0),
)


def all_routes() -> list[Route]:
    """Every route policy, longest prefix first (the first match is the most specific one).
    Disabled slots keep theirs, so their routes answer "slot disabled", not a size error."""
    routes = [route for slot in SLOTS.values() for route in slot.routes] + list(GENERAL_ROUTES)
    return sorted(routes, key=lambda route: len(route.prefix), reverse=True)


def deployment_names() -> dict[str, str]:
    """slot -> its Serve deployment name."""
    return {name: slot.deployment_name for name, slot in SLOTS.items()}
