"""Voice training jobs (OminiX-API's /v1/voices/train*) as records: stages in OminiX-API's
names, progress events, and the jobs kept in the graph's record store (so every ingress replica
answers for every job, across restarts). The pipeline that moves a job through its stages is a
composition above the slots, run by the ingress (ingress/serving/training.py). Pure: no Ray,
no MLX; the store is any object with the record calls of deployments/ingress/serving/records.py.

Stages, in order: queued, audio_slicing, denoising, feature_extraction, the training stage,
registering_voice, then one of complete, failed, cancelled. The training stage is named for
what it does on the model: voice_conditioning for a model with a reference encoder (pocket_tts:
its conditioning computed once), style_fitting for Kokoro (a style fitted to the clip step by
step, each step's loss in `losses`).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from deployments.records import RecordConflict

STAGES = ("queued", "audio_slicing", "denoising", "feature_extraction", "voice_conditioning", "registering_voice")
TRAINING_STAGES = ("voice_conditioning", "style_fitting")  # the same place in the pipeline
FINAL = ("complete", "failed", "cancelled")
# style_fitting's steps per `quality` (Kokoro); a step is one forward and backward pass.
FIT_STEPS = {"fast": 8, "standard": 20, "high": 40}
VOICE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class TrainingJob:
    voice_name: str
    task_id: str = field(default_factory=lambda: f"train-{uuid.uuid4().hex}")
    status: str = "queued"
    stage_progress: float = 0.0
    message: str = "Queued"
    created_at: int = field(default_factory=lambda: int(time.time()))
    completed_at: Optional[int] = None
    error: Optional[str] = None
    losses: list[dict[str, Any]] = field(default_factory=list)  # style_fitting: {"step", "loss"} each step
    fit: Optional[dict[str, Any]] = None  # style_fitting's outcome: similarities, nearest stock voice
    version: int = 0  # bumped on every change, for watchers

    @property
    def is_complete(self) -> bool:
        return self.status in FINAL

    @property
    def progress(self) -> float:
        if self.status == "complete":
            return 1.0
        status = STAGES[STAGES.index(TRAINING_STAGES[0])] if self.status in TRAINING_STAGES else self.status
        if status not in STAGES:
            return 0.0
        return round((STAGES.index(status) + self.stage_progress) / len(STAGES), 3)

    def status_body(self) -> dict[str, Any]:
        """GET /v1/voices/train/status."""
        body = {
            "task_id": self.task_id,
            "voice_name": self.voice_name,
            "status": self.status,
            "progress": self.progress,
            "created_at": self.created_at,
        }
        if self.completed_at is not None:
            body["completed_at"] = self.completed_at
        if self.error is not None:
            body["error"] = self.error
        if self.fit is not None:
            body["fit"] = self.fit
        return body

    def event(self) -> dict[str, Any]:
        """An SSE event of GET /v1/voices/train/progress."""
        event = {
            "task_id": self.task_id,
            "stage": self.status,
            "progress": self.progress,
            "stage_progress": self.stage_progress,
            "message": self.message,
            "is_complete": self.is_complete,
        }
        if self.losses:
            event["losses"] = list(self.losses)
        if self.fit is not None:
            event["fit"] = self.fit
        if self.error is not None:
            event["error"] = self.error
        return event


class TrainingInterrupted(Exception):
    """Another process cancelled the job this process runs (seen at its next write)."""


class JobStore:
    """The jobs as records of the graph's record store (namespace `voice_training`), so every
    ingress replica answers for every job, and a job outlives the replica that reported it.

    The process that runs a job owns it: it keeps the job's latest state in `jobs`, writes each
    change over the version it wrote last (a write that finds another version means another
    replica cancelled the job: `TrainingInterrupted`) and, in a store other processes share,
    refreshes a heartbeat. A job that is not final and whose owner is gone (a private store read
    by a new process; a shared one whose heartbeat is older than `lease_s`) was interrupted: it
    is failed when read. One job runs at a time: the `running` record names it, claimed with a
    conditional write, so two replicas starting at once cannot both win."""

    NAMESPACE = "voice_training"
    RUNNING = "running"  # the record naming the job that holds the one training slot
    LEASE_S = 30.0
    HEARTBEAT_S = 5.0

    def __init__(self, records: Any, owner: Optional[str] = None, lease_s: float = LEASE_S):
        self.records = records
        self.owner = owner or uuid.uuid4().hex
        self.lease_s = lease_s
        self.jobs: dict[str, TrainingJob] = {}  # the jobs this process runs or ran
        self._versions: dict[str, int] = {}  # the record version each owned job was last written at

    # ------------------------------------------------------------------ reads

    async def get(self, task_id: str) -> Optional[TrainingJob]:
        """The job as it stands (this process's own state for its jobs), None if unknown."""
        if task_id in self.jobs:
            return await self._own(self.jobs[task_id])
        if task_id == self.RUNNING:
            return None
        record = await self.records.get(self.NAMESPACE, task_id)
        if record is None:
            return None
        job = _job(record.value)
        if job is not None and not job.is_complete and self._orphaned(record.value):
            job = await self._fail_interrupted(job, record.version)
        return job

    async def _own(self, job: TrainingJob) -> TrainingJob:
        """A job this process runs, with a cancellation another replica wrote taken in (the
        caller stops the job's task: it is complete now)."""
        if job.is_complete or not self.records.shared:
            return job
        record = await self.records.get(self.NAMESPACE, job.task_id)
        if record is not None and record.version != self._versions.get(job.task_id):
            theirs = _job(record.value)
            if theirs is not None and theirs.status == "cancelled":
                self._take_cancellation(job, theirs)
                self._versions[job.task_id] = record.version
        return job

    @staticmethod
    def _take_cancellation(job: TrainingJob, theirs: TrainingJob) -> None:
        for key in ("status", "message", "completed_at"):
            setattr(job, key, getattr(theirs, key))
        job.version += 1

    def _orphaned(self, value: dict[str, Any]) -> bool:
        if value.get("owner") == self.owner:
            return False
        if not self.records.shared:  # another process wrote it, and that process is gone
            return True
        return value.get("heartbeat", 0) < time.time() - self.lease_s

    async def _fail_interrupted(self, job: TrainingJob, version: int) -> TrainingJob:
        reason = "interrupted: the server restarted during the job"
        job.status, job.error, job.message, job.completed_at = "failed", reason, reason, int(time.time())
        job.version += 1
        try:
            await self.records.put(self.NAMESPACE, job.task_id, self._value(job), version)
        except RecordConflict:  # its owner wrote meanwhile: it lives; read it again next time
            pass
        return job

    async def active(self) -> Optional[TrainingJob]:
        """The job that holds the one training slot, if it is still running."""
        running = await self.records.get(self.NAMESPACE, self.RUNNING)
        if running is None:
            return None
        job = await self.get(running.value.get("task_id", ""))
        return None if job is None or job.is_complete else job

    # ------------------------------------------------------------------ the owner's writes

    async def add(self, job: TrainingJob) -> bool:
        """Claim the training slot for `job` and write it; False when another job holds it."""
        running = await self.records.get(self.NAMESPACE, self.RUNNING)
        if running is not None:
            holder = await self.get(running.value.get("task_id", ""))
            if holder is not None and not holder.is_complete:
                return False
        try:
            await self.records.put(
                self.NAMESPACE, self.RUNNING, {"task_id": job.task_id}, running.version if running else 0
            )
        except RecordConflict:  # another replica claimed it first
            return False
        self.jobs[job.task_id] = job
        self._versions[job.task_id] = await self.records.put(self.NAMESPACE, job.task_id, self._value(job))
        return True

    async def update(self, job: TrainingJob, **changes: Any) -> None:
        """Apply and write the changes; `TrainingInterrupted` when another replica cancelled
        the job meanwhile (the record then keeps the cancellation)."""
        for key, value in changes.items():
            setattr(job, key, value)
        if job.is_complete and job.completed_at is None:
            job.completed_at = int(time.time())
        job.version += 1
        await self._write(job)

    async def heartbeat(self, job: TrainingJob) -> None:
        """Say that the owner still runs the job (no change a watcher would see)."""
        await self._write(job)

    async def _write(self, job: TrainingJob) -> None:
        try:
            self._versions[job.task_id] = await self.records.put(
                self.NAMESPACE, job.task_id, self._value(job), self._versions.get(job.task_id)
            )
        except RecordConflict:
            record = await self.records.get(self.NAMESPACE, job.task_id)
            theirs = _job(record.value) if record is not None else None
            if theirs is not None and theirs.status == "cancelled":
                self._take_cancellation(job, theirs)
                self._versions[job.task_id] = record.version
                raise TrainingInterrupted(job.task_id) from None
            # Written by someone that did not cancel it (a reader that thought it orphaned): ours wins.
            self._versions[job.task_id] = await self.records.put(self.NAMESPACE, job.task_id, self._value(job))

    async def cancel_elsewhere(self, job: TrainingJob) -> TrainingJob:
        """Cancel a job another process runs: its record says so, and its owner stops at its next
        write (a progress step or a heartbeat)."""
        record = await self.records.get(self.NAMESPACE, job.task_id)
        if record is None:
            return job
        job = _job(record.value) or job
        job.status, job.message, job.completed_at = "cancelled", "Cancelled", int(time.time())
        job.version += 1
        value = {**record.value, **self._value(job), "owner": record.value.get("owner")}
        await self.records.put(self.NAMESPACE, job.task_id, value, record.version)
        return job

    def _value(self, job: TrainingJob) -> dict[str, Any]:
        return {**asdict(job), "owner": self.owner, "heartbeat": time.time()}


def _job(value: dict[str, Any]) -> Optional[TrainingJob]:
    fields = {k: v for k, v in value.items() if k in TrainingJob.__dataclass_fields__}
    try:
        return TrainingJob(**fields)
    except TypeError:
        return None
