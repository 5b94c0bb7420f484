"""Progress of Hugging Face downloads, for replicas that have no terminal to draw bars on.

A real model can take minutes to download. Inside a Ray replica huggingface_hub's progress bars
are off (no TTY), so nothing would show until the load ends. `progress_class(model_id)` gives
`snapshot_download` a tqdm class that records bytes and files per model (read by the slot agent
into /v1/models/status while a load runs) and logs a line every few seconds (replica logs,
visible in the Ray dashboard). No Ray, no MLX.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional

from huggingface_hub.utils import tqdm as hf_tqdm

logger = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
_lock = threading.Lock()
_active: dict[str, dict] = {}  # model id -> {"bytes", "total_bytes", "files", "total_files", "started_at"}


def active_downloads() -> dict[str, dict]:
    """A copy of the downloads in progress in this process."""
    with _lock:
        return {model: dict(state) for model, state in _active.items()}


def finished(model_id: str) -> None:
    with _lock:
        _active.pop(model_id, None)


def progress_class(model_id: str) -> type:
    """A tqdm class for `snapshot_download(..., tqdm_class=...)` that reports on `model_id`."""
    with _lock:
        _active[model_id] = {
            "bytes": 0,
            "total_bytes": None,
            "files": 0,
            "total_files": None,
            "started_at": time.time(),
        }
    return type("DownloadProgress", (_Progress,), {"model_id": model_id})


class _Progress(hf_tqdm):
    model_id = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A disabled tqdm keeps no count of its own: keep ours.
        self._done = kwargs.get("initial", 0) or 0
        self._is_bytes = kwargs.get("unit") == "B"
        self._last_log = 0.0
        # The transfer bar and the files bar are the two we report; the rest would double count.
        self._tracked = self._is_bytes and kwargs.get("desc") == "Downloading bytes" or not self._is_bytes
        self._publish()

    def update(self, n: Optional[float] = 1):
        self._done += n or 0
        self._publish()
        return super().update(n)

    def _publish(self) -> None:
        if not self._tracked:
            return
        keys = ("bytes", "total_bytes") if self._is_bytes else ("files", "total_files")
        with _lock:
            state = _active.get(self.model_id)
            if state is None:
                return
            state[keys[0]] = int(self._done)
            state[keys[1]] = int(self.total) if self.total else state[keys[1]]
            snapshot = dict(state)
        now = time.monotonic()
        if self._is_bytes and self._done and now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            logger.info("Downloading %s: %s", self.model_id, describe(snapshot))


def describe(state: dict) -> str:
    """'1.2 of 3.4 GB, 2/5 files' from a progress record."""
    gb = state["bytes"] / 1e9
    total = f" of {state['total_bytes'] / 1e9:.2f}" if state.get("total_bytes") else ""
    files = f", {state['files']}/{state['total_files']} files" if state.get("total_files") else ""
    return f"{gb:.2f}{total} GB{files}"
