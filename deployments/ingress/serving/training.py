"""Voice training jobs on the ingress (OminiX-API's /v1/voices/train*), for TTS models with a
reference encoder (pocket_tts): the pipeline is a composition above the slots.

- audio_slicing: decode the clip at the TTS model's rate, cut leading and trailing silence,
  keep at most 30 s (1 s at least);
- denoising: not available here (a request asking for it is a 400), so the stage is skipped;
- feature_extraction: the transcript as given, else the ASR slot's transcript of the clip;
- voice_conditioning: the TTS slot computes the model's conditioning once and caches it
  (.safetensors next to the registry), so syntheses with the voice skip the reference encoder;
- registering_voice: the voice into the registry file, atomically; every replica uses it.

One job runs at a time (a second is a 409); cancelling ends it at once, whatever its stage
(the slot call in flight is cancelled with it). Jobs are records in a state file.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.audio.decode import AudioDecodeError, decode_audio
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.transcription import TranscriptionParams
from deployments.training.jobs import JobStore, TrainingJob

MIN_SECONDS, MAX_SECONDS = 1.0, 30.0
SILENCE = 0.01  # peak-relative amplitude under which the clip's ends count as silence


def trim(samples: np.ndarray, rate: int) -> np.ndarray:
    """The clip without its silent ends, at most MAX_SECONDS."""
    loud = np.flatnonzero(np.abs(samples) > SILENCE * (np.abs(samples).max() or 1.0))
    if loud.size:
        samples = samples[loud[0] : loud[-1] + 1]
    return samples[: int(MAX_SECONDS * rate)]


class VoiceTraining:
    """The ingress's training jobs: one store, one running task at most."""

    def __init__(self, state_dir: Path):
        self.store = JobStore(Path(state_dir) / "voice_training.json")
        self.tasks: dict[str, asyncio.Task] = {}

    def job(self, task_id: str) -> TrainingJob:
        job = self.store.jobs.get(task_id)
        if job is None:
            raise APIError(404, f"Training task '{task_id}' not found", "not_found_error", "task_id", "task_not_found")
        return job

    async def start(
        self, state: IngressState, voice_name: str, audio: bytes, transcript: Optional[str], language: Optional[str]
    ) -> TrainingJob:
        running = self.store.active()
        if running is not None:
            raise APIError(
                409,
                f"Training task '{running.task_id}' ({running.voice_name}) is running; one runs at a time",
                "conflict_error",
                None,
                "training_in_progress",
            )
        facts = await state.slot("tts").call("describe")
        if facts["model_type"] != "pocket_tts":
            raise invalid_request(
                f"The TTS slot's default model '{facts['model']}' ({facts['model_type']}) has no reference encoder "
                "to train a voice for; voice training runs on pocket_tts models (e.g. ominix-tiny-pocket-tts)",
                "model",
                "training_unsupported",
            )
        job = TrainingJob(voice_name=voice_name)
        self.store.add(job)
        self.tasks[job.task_id] = asyncio.create_task(self._run(state, job, audio, transcript, language, facts))
        return job

    def cancel(self, task_id: str) -> dict[str, Any]:
        job = self.job(task_id)
        if job.is_complete:
            raise APIError(409, f"Training task '{task_id}' is already {job.status}", "conflict_error", "task_id")
        self.store.update(job, status="cancelled", message="Cancelled")
        task = self.tasks.pop(task_id, None)
        if task is not None:
            task.cancel()
        return {"status": "success", "message": f"Training task '{task_id}' cancelled"}

    async def watch(self, task_id: str, poll_s: float = 0.1, keepalive_s: float = 10.0):
        """The job's current state first (a late client sees where it is), then each change,
        until the final one; `None` after `keepalive_s` without one (a keep-alive)."""
        job, seen, idle = self.job(task_id), -1, 0.0
        while True:
            if job.version != seen:
                seen, idle, event = job.version, 0.0, job.event()
                yield event
                if event["is_complete"]:  # as sent: the job may have moved on while we yielded
                    return
            elif idle >= keepalive_s:
                idle = 0.0
                yield None
            await asyncio.sleep(poll_s)
            idle += poll_s

    # ------------------------------------------------------------------ the pipeline

    async def _run(self, state, job, audio, transcript, language, facts) -> None:
        try:
            samples = await self._slice(job, audio, facts["sample_rate"])
            self.store.update(job, status="denoising", stage_progress=0.0, message="Skipped: no denoiser here")
            transcript = await self._transcript(state, job, audio, transcript, language)
            self._stage(job, "voice_conditioning", "Computing the voice's conditioning once (reference encoder)")
            tts = state.slot("tts")
            files = await tts.call("cache_conditioning", job.voice_name, samples.astype("<f4").tobytes())
            self._stage(job, "registering_voice", "Registering the voice")
            await tts.call("register_trained_voice", job.voice_name, files, transcript or "", language)
            self.store.update(job, status="complete", stage_progress=1.0, message=f"Voice '{job.voice_name}' is ready")
        except asyncio.CancelledError:
            if not job.is_complete:
                self.store.update(job, status="cancelled", message="Cancelled")
        except Exception as e:  # the job fails with the reason; the server goes on
            reason = e.message if isinstance(e, APIError) else f"{type(e).__name__}: {e}"
            self.store.update(job, status="failed", message=f"Training failed: {reason}", error=reason)
        finally:
            self.tasks.pop(job.task_id, None)

    def _stage(self, job: TrainingJob, stage: str, message: str) -> None:
        self.store.update(job, status=stage, stage_progress=0.0, message=message)

    async def _slice(self, job: TrainingJob, audio: bytes, rate: int) -> np.ndarray:
        self._stage(job, "audio_slicing", "Decoding the clip and cutting its silent ends")
        try:
            samples = await asyncio.to_thread(decode_audio, audio, rate)
        except AudioDecodeError as e:
            raise invalid_request(f"The audio cannot be decoded: {e}", "audio") from None
        samples = trim(samples, rate)
        if samples.size < MIN_SECONDS * rate:
            raise invalid_request(f"The clip has less than {MIN_SECONDS:g} s of sound", "audio")
        return samples

    async def _transcript(self, state, job, audio, transcript, language) -> Optional[str]:
        if transcript:
            self._stage(job, "feature_extraction", "Using the transcript given")
            return transcript
        self._stage(job, "feature_extraction", "Transcribing the clip (ASR slot)")
        result = await state.slot("asr").call("transcribe", TranscriptionParams(language=language), audio, None)
        return result.text.strip()
