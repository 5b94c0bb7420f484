"""Voice training jobs on the ingress (OminiX-API's /v1/voices/train*): the pipeline is a
composition above the slots, for the TTS slot's default model when it is pocket_tts or Qwen3-TTS
Base (models with a reference encoder) or Kokoro (a style fitted to the clip).

- audio_slicing: decode the clip at the TTS model's rate, cut leading and trailing silence,
  keep at most 30 s (1 s at least);
- denoising: when asked (`denoise: true`), stationary noise gated out (deployments/audio/
  denoise.py), in a worker thread; skipped otherwise;
- feature_extraction: the transcript as given, else the ASR slot's transcript of the clip;
- the training stage, named for what it does:
  - voice_conditioning (pocket_tts, Qwen3-TTS Base): the TTS slot computes the model's
    conditioning once (pocket_tts's audio prompt; Qwen3-TTS's x-vector and reference codes) and
    caches it (.safetensors next to the registry), so syntheses skip the reference encoder;
  - style_fitting (Kokoro): one TTS replica fits a style to the clip (deployments/tts/
    kokoro_fit.py), streaming one loss per step (the events' `losses`); `quality` sets the
    number of steps; the fitted voice pack is stored next to the registry;
- registering_voice: the voice into the registry file, atomically; every replica uses it.

One job runs at a time across the graph (a second is a 409); cancelling ends it at once,
whatever its stage (the slot call in flight is cancelled with it; a fit stops after its current
step). Jobs are records of the graph's record store (Control's: deployments/voices/jobs.py), so
status, progress and cancel answer from any ingress replica; the replica that runs a job
heartbeats it, and a cancel sent to another replica reaches it at its next write (a progress
step, or the heartbeat within `JobStore.HEARTBEAT_S`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Optional

import numpy as np

from deployments.audio.decode import AudioDecodeError, decode_audio
from deployments.audio.denoise import denoise
from deployments.ingress.serving.records import LocalRecords, Records
from deployments.ingress.state import IngressState
from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.transcription import TranscriptionParams
from deployments.voices.jobs import FIT_STEPS, JobStore, TrainingInterrupted, TrainingJob

MIN_SECONDS, MAX_SECONDS = 1.0, 30.0
TRAINABLE = ("pocket_tts", "kokoro", "qwen3_tts")  # model types with a training stage
SCORING_SHARE = 0.2  # style_fitting's stage_progress spent scoring the stock voices
SILENCE = 0.01  # peak-relative amplitude under which the clip's ends count as silence
FOREIGN_POLL_S = 0.5  # how often a progress stream reads a job another replica runs


def trim(samples: np.ndarray, rate: int) -> np.ndarray:
    """The clip without its silent ends, at most MAX_SECONDS."""
    loud = np.flatnonzero(np.abs(samples) > SILENCE * (np.abs(samples).max() or 1.0))
    if loud.size:
        samples = samples[loud[0] : loud[-1] + 1]
    return samples[: int(MAX_SECONDS * rate)]


class VoiceTraining:
    """The graph's training jobs as this ingress replica serves them: the jobs' records, and
    the task of the one it runs, if any."""

    def __init__(self, records: Records | Path):
        # A directory: a private store there (what an ingress without Control keeps).
        self.store = JobStore(records if not isinstance(records, (str, Path)) else LocalRecords.in_dir(records))
        self.tasks: dict[str, asyncio.Task] = {}

    async def job(self, task_id: str) -> TrainingJob:
        job = await self.store.get(task_id)
        if job is None:
            raise APIError(404, f"Training task '{task_id}' not found", "not_found_error", "task_id", "task_not_found")
        if job.is_complete and task_id in self.tasks:  # cancelled through another replica
            self.tasks.pop(task_id).cancel()
        return job

    async def start(
        self,
        state: IngressState,
        voice_name: str,
        audio: bytes,
        transcript: Optional[str],
        language: Optional[str],
        quality: str = "standard",
        denoise: bool = False,
        steps: Optional[int] = None,
        base_voices: Optional[list[str]] = None,
    ) -> TrainingJob:
        running = await self.store.active()
        if running is not None:
            raise _busy(running)
        facts = await state.slot("tts").call("describe")
        # The slot's own reason first: a model type may train in one variant only (Qwen3-TTS Base).
        why = facts.get("training_unsupported") or (
            None
            if facts["model_type"] in TRAINABLE
            else "voice training runs on Kokoro (a fitted style), pocket_tts and Qwen3-TTS Base (a reference encoder)"
        )
        if why:
            raise invalid_request(
                f"The TTS slot's default model '{facts['model']}' ({facts['model_type']}) cannot be trained: {why}",
                "model",
                "training_unsupported",
            )
        unknown = sorted(set(base_voices or ()) - set(facts.get("presets") or ()))
        if unknown:
            raise invalid_request(
                f"base_voices: {', '.join(unknown)} not among the stock voices of '{facts['model']}'",
                "base_voices",
                "voice_not_found",
            )
        job = TrainingJob(voice_name=voice_name)
        if not await self.store.add(job):  # another replica started one meanwhile
            raise _busy(await self.store.active() or job)
        options = {"quality": quality, "denoise": denoise, "steps": steps, "base_voices": base_voices}
        task = asyncio.create_task(self._run(state, job, audio, transcript, language, facts, options))
        self.tasks[job.task_id] = task
        if self.store.records.shared:
            asyncio.create_task(self._heartbeat(job, task))
        return job

    async def cancel(self, task_id: str) -> dict[str, Any]:
        job = await self.job(task_id)
        if job.is_complete:
            raise APIError(409, f"Training task '{task_id}' is already {job.status}", "conflict_error", "task_id")
        if task_id in self.store.jobs:
            await self.store.update(job, status="cancelled", message="Cancelled")
        else:  # another replica runs it
            await self.store.cancel_elsewhere(job)
        task = self.tasks.pop(task_id, None)
        if task is not None:
            task.cancel()
        return {"status": "success", "message": f"Training task '{task_id}' cancelled"}

    async def watch(self, task_id: str, poll_s: float = 0.1, keepalive_s: float = 10.0):
        """The job's current state first (a late client sees where it is), then each change,
        until the final one; `None` after `keepalive_s` without one (a keep-alive). A job this
        replica runs is watched in memory; another replica's is read from the store."""
        job, seen, idle, unread = await self.job(task_id), -1, 0.0, 0.0
        own = task_id in self.store.jobs
        if not own:
            poll_s = max(poll_s, FOREIGN_POLL_S)
        while True:
            if unread >= FOREIGN_POLL_S or (not own and seen >= 0):
                # Another replica's job is read each time; ours now and then, for a cancel sent elsewhere.
                job, unread = await self.job(task_id), 0.0
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
            unread += poll_s

    async def _heartbeat(self, job: TrainingJob, task: asyncio.Task) -> None:
        """While the job runs: tell the store this replica still runs it, and stop the job when
        another replica cancelled it (the slot call in flight is cancelled with the task)."""
        while not task.done():
            await asyncio.sleep(JobStore.HEARTBEAT_S)
            if task.done() or job.is_complete:
                return
            try:
                await self.store.heartbeat(job)
            except TrainingInterrupted:
                task.cancel()
                return
            except Exception:  # the store is away for a moment: the next beat tries again
                continue

    # ------------------------------------------------------------------ the pipeline

    async def _run(self, state, job, audio, transcript, language, facts, options) -> None:
        try:
            samples = await self._slice(job, audio, facts["sample_rate"])
            samples = await self._denoise(job, samples, facts["sample_rate"], options["denoise"])
            transcript = await self._transcript(state, job, audio, transcript, language)
            tts = state.slot("tts")
            if facts["model_type"] == "kokoro":
                files = await self._fit_style(tts, job, samples, options, language)
            else:
                await self._stage(
                    job, "voice_conditioning", "Computing the voice's conditioning once (reference encoder)"
                )
                files = await tts.call("cache_conditioning", job.voice_name, samples.astype("<f4").tobytes())
            await self._stage(job, "registering_voice", "Registering the voice")
            await tts.call("register_trained_voice", job.voice_name, files, transcript or "", language)
            await self.store.update(job, status="complete", stage_progress=1.0, message=self._ready(job))
        except TrainingInterrupted:  # cancelled through another replica: the record says so
            pass
        except asyncio.CancelledError:
            if not job.is_complete:
                await self._final(job, status="cancelled", message="Cancelled")
        except Exception as e:  # the job fails with the reason; the server goes on
            reason = e.message if isinstance(e, APIError) else f"{type(e).__name__}: {e}"
            await self._final(job, status="failed", message=f"Training failed: {reason}", error=reason)
        finally:
            self.tasks.pop(job.task_id, None)

    @staticmethod
    def _ready(job: TrainingJob) -> str:
        message = f"Voice '{job.voice_name}' is ready"
        if job.fit:
            message += (
                f": speaker similarity {job.fit['similarity']:.3f} to the clip (nearest stock voice "
                f"{job.fit['nearest_voice']}: {job.fit['nearest_similarity']:.3f})"
            )
        return message

    async def _final(self, job: TrainingJob, **changes: Any) -> None:
        try:
            await self.store.update(job, **changes)
        except TrainingInterrupted:
            pass

    async def _stage(self, job: TrainingJob, stage: str, message: str) -> None:
        await self.store.update(job, status=stage, stage_progress=0.0, message=message)

    async def _slice(self, job: TrainingJob, audio: bytes, rate: int) -> np.ndarray:
        await self._stage(job, "audio_slicing", "Decoding the clip and cutting its silent ends")
        try:
            samples = await asyncio.to_thread(decode_audio, audio, rate)
        except AudioDecodeError as e:
            raise invalid_request(f"The audio cannot be decoded: {e}", "audio") from None
        samples = trim(samples, rate)
        if samples.size < MIN_SECONDS * rate:
            raise invalid_request(f"The clip has less than {MIN_SECONDS:g} s of sound", "audio")
        return samples

    async def _denoise(self, job: TrainingJob, samples: np.ndarray, rate: int, wanted: bool) -> np.ndarray:
        if not wanted:
            await self._stage(job, "denoising", "Skipped: not asked for (denoise: false)")
            return samples
        await self._stage(job, "denoising", "Gating out stationary noise (spectral gating)")
        return await asyncio.to_thread(denoise, samples, rate)

    async def _fit_style(self, tts, job: TrainingJob, samples: np.ndarray, options: dict, language) -> dict:
        """Kokoro's training stage: the TTS slot's streamed fit, its events into the job."""
        steps = options["steps"] or FIT_STEPS[options["quality"]]
        await self._stage(job, "style_fitting", "Scoring Kokoro's stock voices against the clip (speaker embeddings)")
        audio = samples.astype("<f4").tobytes()
        stream = await tts.stream("fit_voice", job.voice_name, audio, steps, language, options["base_voices"])
        files = None
        async for event in stream.chunks():
            if "scored" in event:
                done = SCORING_SHARE * event["scored"] / event["of"]
                await self.store.update(job, stage_progress=round(done, 3))
            elif "step" in event:
                job.losses.append({"step": event["step"], "loss": event["loss"]})
                await self.store.update(
                    job,
                    stage_progress=round(SCORING_SHARE + (1 - SCORING_SHARE) * (event["step"] + 1) / steps, 3),
                    message=f"Fitting the style: step {event['step'] + 1}/{steps}, loss {event['loss']:.4f}",
                )
            elif "files" in event:
                files = event.pop("files")
                await self.store.update(job, fit=event)
        if files is None:
            raise RuntimeError("the TTS slot ended the fit without a voice")
        return files

    async def _transcript(self, state, job, audio, transcript, language) -> Optional[str]:
        if transcript:
            await self._stage(job, "feature_extraction", "Using the transcript given")
            return transcript
        await self._stage(job, "feature_extraction", "Transcribing the clip (ASR slot)")
        result = await state.slot("asr").call("transcribe", TranscriptionParams(language=language), audio, None)
        return result.text.strip()


def _busy(running: TrainingJob) -> APIError:
    return APIError(
        409,
        f"Training task '{running.task_id}' ({running.voice_name}) is running; one runs at a time",
        "conflict_error",
        None,
        "training_in_progress",
    )
