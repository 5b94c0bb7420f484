"""Voice training jobs (OminiX-API's /v1/voices/train*) as records: stages in OminiX-API's
names, progress events, the state file that keeps them across an ingress restart. The pipeline
that moves a job through its stages is a composition above the slots, run by the ingress
(ingress/serving/training.py). Pure: no Ray, no MLX.

Stages, in order: queued, audio_slicing, denoising, feature_extraction, the training stage,
registering_voice, then one of complete, failed, cancelled. The training stage is named for
what it does on the model: voice_conditioning for a model with a reference encoder (pocket_tts:
its conditioning computed once), style_fitting for Kokoro (a style fitted to the clip step by
step, each step's loss in `losses`).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from deployments.voices.registry import atomic_write

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


class JobStore:
    """The jobs, written to a JSON file on every change (atomically). A job that was running
    when the file was last written belongs to a process that is gone: it is failed on load."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.jobs: dict[str, TrainingJob] = {}
        self._lock = threading.Lock()
        self._load()

    def _load(self) -> None:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        for record in raw.get("jobs", []) if isinstance(raw, dict) else []:
            try:
                job = TrainingJob(**record)
            except TypeError:
                continue
            if not job.is_complete:
                job.status, job.error = "failed", "interrupted: the server restarted during the job"
                job.message, job.completed_at = job.error, int(time.time())
            self.jobs[job.task_id] = job
        self._save()

    def _save(self) -> None:
        records = [{k: v for k, v in asdict(job).items() if k != "version"} for job in self.jobs.values()]
        atomic_write(self.path, (json.dumps({"jobs": records}, indent=2) + "\n").encode())

    def active(self) -> Optional[TrainingJob]:
        return next((job for job in self.jobs.values() if not job.is_complete), None)

    def add(self, job: TrainingJob) -> None:
        with self._lock:
            self.jobs[job.task_id] = job
            self._save()

    def update(self, job: TrainingJob, **changes: Any) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(job, key, value)
            if job.is_complete and job.completed_at is None:
                job.completed_at = int(time.time())
            job.version += 1
            self._save()
