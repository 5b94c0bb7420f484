"""Model downloads into the Hugging Face cache, one at a time, with OminiX-API's progress
events (queued, listing, downloading, ready, cancelled, error) and cancellation.

A download lists the repo (`model_info`), then fetches each file with `hf_hub_download` into
the cache (resumable: huggingface_hub keeps `.incomplete` blobs and sends a Range). Progress is
counted by a tqdm class handed to huggingface_hub; cancelling makes that class raise at the next
chunk, so a download stops within one chunk. A download that fails or is cancelled leaves no
partial files: the repo's cache folder goes if it was not there before, else its incomplete blobs.
No Ray, no MLX: the ingress runs it on a thread (docs/api/models.md#the-catalog-and-downloads).
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

ACTIVE = ("queued", "listing", "downloading")
LIST_TIMEOUT_S = 10.0
# huggingface_hub reads a file body in chunks of constants.DOWNLOAD_CHUNK_SIZE (10 MiB) and
# reports progress once per chunk: at 1 MB/s that is a cancel honoured 10 s late. 256 KiB
# reads cost nothing measurable and keep progress and cancel prompt (this process only).
CHUNK_BYTES = 256 * 1024


class DownloadCancelled(Exception):
    pass


@dataclass
class DownloadTask:
    model_id: str
    task_id: str = field(default_factory=lambda: f"dl-{uuid.uuid4().hex}")
    state: str = "queued"
    current_file: Optional[str] = None
    current_file_index: int = 0
    total_files: int = 0
    downloaded_bytes: int = 0
    total_bytes: int = 0
    message: str = "Queued"
    error: Optional[str] = None
    started_at: float = field(default_factory=time.monotonic)
    version: int = 0  # bumped on every change, for watchers
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def is_complete(self) -> bool:
        return self.state not in ACTIVE

    def event(self) -> dict[str, Any]:
        """OminiX-API's progress event."""
        elapsed = max(time.monotonic() - self.started_at, 1e-6)
        speed = self.downloaded_bytes / elapsed if self.state == "downloading" else 0.0
        left = self.total_bytes - self.downloaded_bytes
        event: dict[str, Any] = {
            "model_id": self.model_id,
            "task_id": self.task_id,
            "state": self.state,
            "current_file": self.current_file,
            "current_file_index": self.current_file_index,
            "total_files": self.total_files,
            "downloaded_bytes": self.downloaded_bytes,
            "total_bytes": self.total_bytes,
            "progress": self.downloaded_bytes / self.total_bytes if self.total_bytes else float(self.state == "ready"),
            "speed_bytes_per_sec": round(speed, 1),
            "eta_seconds": round(left / speed, 1) if speed > 0 and left > 0 else None,
            "message": self.message,
            "is_complete": self.is_complete,
        }
        if self.error is not None:
            event["error"] = self.error
        return event


class DownloadManager:
    def __init__(self, cache_dir: Optional[Path] = None, endpoint: Optional[str] = None):
        from huggingface_hub import constants

        constants.DOWNLOAD_CHUNK_SIZE = min(constants.DOWNLOAD_CHUNK_SIZE, CHUNK_BYTES)
        self.cache_dir = Path(cache_dir) if cache_dir else None  # None: huggingface_hub's own
        self.endpoint = endpoint  # None: HF_ENDPOINT, else huggingface.co
        self.tasks: dict[str, DownloadTask] = {}
        self._lock = threading.Condition()
        self._queue: list[DownloadTask] = []
        self._worker: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ the API's side

    def active(self, model_id: str) -> Optional[DownloadTask]:
        task = self.tasks.get(model_id)
        return task if task is not None and not task.is_complete else None

    def start(self, model_id: str) -> DownloadTask:
        """Queue a download (the caller checked it may be downloaded and is not on disk)."""
        with self._lock:
            task = DownloadTask(model_id)
            self.tasks[model_id] = task
            self._queue.append(task)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="model-downloads", daemon=True)
                self._worker.start()
            self._lock.notify_all()
            return task

    def cancel(self, model_id: str) -> bool:
        task = self.active(model_id)
        if task is None:
            return False
        task.cancel.set()
        with self._lock:
            if task in self._queue:  # not started: cancelled at once
                self._queue.remove(task)
                self._finish(task, "cancelled", "Download cancelled")
        return True

    def events(self, model_id: Optional[str] = None) -> list[dict[str, Any]]:
        with self._lock:
            return [t.event() for t in self.tasks.values() if model_id in (None, t.model_id)]

    async def watch(
        self, model_id: Optional[str] = None, poll_s: float = 0.25, keepalive_s: float = 10.0
    ) -> AsyncIterator[Optional[dict[str, Any]]]:
        """The current state of each watched task first (a late client sees where it is), then
        every change, until every watched task is complete; `None` after `keepalive_s` without
        one (a keep-alive: a stalled download keeps its stream open)."""
        seen: dict[str, int] = {}
        quiet = 0.0
        while True:
            with self._lock:
                tasks = [t for t in self.tasks.values() if model_id in (None, t.model_id)]
                changed = [t for t in tasks if seen.get(t.task_id) != t.version]
                events = [t.event() for t in changed]
                for t in changed:
                    seen[t.task_id] = t.version
                done = all(t.is_complete for t in tasks)
            for event in events:
                yield event
            if done:
                return
            quiet = 0.0 if events else quiet + poll_s
            if quiet >= keepalive_s:
                quiet = 0.0
                yield None
            await asyncio.sleep(poll_s)

    # ------------------------------------------------------------------ the worker's side

    def _work(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._worker = None
                    return
                task = self._queue.pop(0)
            self._download(task)

    def _update(self, task: DownloadTask, **changes: Any) -> None:
        with self._lock:
            for key, value in changes.items():
                setattr(task, key, value)
            task.version += 1
            self._lock.notify_all()

    def _finish(self, task: DownloadTask, state: str, message: str, error: Optional[str] = None) -> None:
        task.state, task.message, task.error = state, message, error
        task.version += 1

    def _download(self, task: DownloadTask) -> None:
        from huggingface_hub import HfApi, hf_hub_download

        repo_dir = self._repo_dir(task.model_id)
        existed = repo_dir.exists()
        try:
            self._update(task, state="listing", message="Listing files...")
            info = HfApi(endpoint=self.endpoint).model_info(task.model_id, files_metadata=True, timeout=LIST_TIMEOUT_S)
            files = [(s.rfilename, s.size or 0) for s in info.siblings or []]
            self._update(task, state="downloading", total_files=len(files), total_bytes=sum(s for _, s in files))
            for index, (name, _) in enumerate(files, 1):
                if task.cancel.is_set():
                    raise DownloadCancelled
                self._update(
                    task,
                    current_file=name,
                    current_file_index=index,
                    message=f"Downloading [{index}/{len(files)}]: {name}",
                )
                hf_hub_download(
                    task.model_id,
                    name,
                    revision=info.sha,
                    cache_dir=self.cache_dir,
                    endpoint=self.endpoint,
                    tqdm_class=self._progress_class(task),
                    etag_timeout=LIST_TIMEOUT_S,
                )
            # What snapshot_download records: "main" is this commit (lookups by repo id find it).
            (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
            (repo_dir / "refs" / "main").write_text(info.sha)
            with self._lock:
                self._finish(task, "ready", f"Model {task.model_id} downloaded successfully")
        except BaseException as e:  # cancelled, offline, not found, disk full: nothing half-written stays
            self._clean(repo_dir, existed)
            with self._lock:
                if task.cancel.is_set() or isinstance(e, DownloadCancelled):
                    self._finish(task, "cancelled", "Download cancelled")
                else:
                    reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'no detail'}"
                    self._finish(task, "error", f"Download failed: {reason}", reason)

    def _progress_class(self, task: DownloadTask) -> type:
        from huggingface_hub.utils import tqdm as hf_tqdm

        manager = self

        class Progress(hf_tqdm):
            def __init__(self, *args, **kwargs):
                kwargs["disable"] = True
                super().__init__(*args, **kwargs)

            def update(self, n: Optional[float] = 1):
                if task.cancel.is_set():
                    raise DownloadCancelled
                manager._update(task, downloaded_bytes=task.downloaded_bytes + int(n or 0))
                return super().update(n)

        return Progress

    def _repo_dir(self, model_id: str) -> Path:
        from huggingface_hub import constants

        root = self.cache_dir or Path(constants.HF_HUB_CACHE)
        return Path(root) / f"models--{model_id.replace('/', '--')}"

    @staticmethod
    def _clean(repo_dir: Path, existed: bool) -> None:
        if not existed:
            shutil.rmtree(repo_dir, ignore_errors=True)
            return
        for partial in (repo_dir / "blobs").glob("*.incomplete"):
            partial.unlink(missing_ok=True)
