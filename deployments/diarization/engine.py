"""The diarization models (Silero VAD, the GE2E speaker encoder) on a thread of their own, in the
replica that decoded the audio: the ASR slot's (deployments/asr/deployment.py says why).

One job = one recording, with the known speakers'
reference clips and the options; the answer is a `Diarization`. A streaming session's utterance
is a `VoicesJob`: its voice pieces and their embeddings, clustered by the session
(deployments/diarization/track.py). No Ray here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deployments.diarization.config import SPEAKER_MODEL_ID, DiarizationConfig, SpeakerCount
from deployments.diarization.spans import Span
from deployments.engine_thread import EngineThread, Message
from deployments.hub import ModelUnavailable
from deployments.protocol.errors import invalid_request

if TYPE_CHECKING:
    from deployments.diarization.pipeline import Diarization


@dataclass(eq=False)
class DiarizeJob(Message):
    samples: np.ndarray  # mono float32
    rate: int
    config: DiarizationConfig
    count: SpeakerCount = field(default_factory=SpeakerCount)
    references: dict[str, np.ndarray] = field(default_factory=dict)  # name -> 16 kHz clip


@dataclass(eq=False)
class VoicesJob(Message):
    samples: np.ndarray  # mono float32, 16 kHz
    config: DiarizationConfig


class DiarizationEngine(EngineThread[DiarizeJob | VoicesJob]):
    """Create with `await DiarizationEngine.start()`; `diarize(job)` answers one recording."""

    kind = "diarization"

    def __init__(self):
        super().__init__(SPEAKER_MODEL_ID, Path("."))
        self.stats = {"recordings": 0, "audio_s": 0.0}

    async def diarize(self, job: DiarizeJob) -> Diarization:
        return await self.submit(job)

    async def voices(self, job: VoicesJob) -> tuple[list[Span], np.ndarray]:
        return await self.submit(job)

    def _load(self) -> None:
        # MLX only here, on the engine's thread: the ASR deployment imports this module before
        # its replica has chosen a BLAS (deployments/blas.py), which importing MLX would defeat.
        from deployments.diarization.pipeline import Diarizer

        try:
            self._model = Diarizer()
        except ModelUnavailable as e:  # the speaker model's package is not installed
            raise invalid_request(
                f"Diarization is not available on this server: {e}", None, "diarization_unavailable"
            ) from None

    def _handle(self, job: DiarizeJob | VoicesJob) -> Diarization | tuple[list[Span], np.ndarray]:
        if isinstance(job, VoicesJob):
            self.stats["audio_s"] += len(job.samples) / 16000
            return self._model.voice_pieces(job.samples, job.config)
        known = {name: self._model.embed(clip) for name, clip in job.references.items()}
        result = self._model.diarize(job.samples, job.rate, job.config, count=job.count, known=known)
        self.stats["recordings"] += 1
        self.stats["audio_s"] += result.duration
        return result
