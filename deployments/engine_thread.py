"""The base of every slot engine: one MLX model owned by one thread.

MLX work for a model runs on a single thread: that thread loads the model, serves the work the
replica's asyncio loop puts in its inbox, and on shutdown drops the model and clears MLX's
cache so an unload or an eviction really frees memory. A slot engine (LLM, ASR, TTS, image)
subclasses this and supplies `_load`, `_serve` (its loop over the inbox until `STOP`),
`_release` and `_fail_queued`; the asyncio side gets `start`, `shutdown`, `closed`,
`thread_died` and `_ensure_open` from here.

No Ray here.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import queue
import threading
from pathlib import Path
from typing import Any, Optional

from deployments.protocol.errors import APIError

logger = logging.getLogger(__name__)

STOP = object()  # put in the inbox by shutdown(): the engine loop returns when it takes it


class EngineThread:
    """Create with `await Engine.start(...)`, release with `shutdown()`."""

    kind = "mlx"  # names the thread and the log lines: llm, asr, tts, image

    def __init__(self, model_id: str, model_dir: Path):
        self.model_id = model_id
        self.model_dir = Path(model_dir)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._loaded = threading.Event()
        self._load_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=f"mlx-{self.kind}:{model_id}", daemon=True)
        self._closed = False

    @classmethod
    async def start(cls, *args: Any, **kwargs: Any):
        """Construct the engine and wait (off the event loop) until its thread has loaded the model."""
        engine = cls(*args, **kwargs)
        engine._thread.start()
        await asyncio.to_thread(engine._loaded.wait)
        if engine._load_error is not None:
            raise engine._load_error
        return engine

    # ------------------------------------------------------------------ asyncio side

    def _ensure_open(self) -> None:
        if self._closed:
            raise APIError(503, f"Model '{self.model_id}' is unloading", "service_unavailable")

    def shutdown(self) -> None:
        """Stop the thread and free the model's memory. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(STOP)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=60)

    @property
    def closed(self) -> bool:
        return self._closed

    def thread_died(self) -> bool:
        return not self._closed and not self._thread.is_alive()

    def pending(self) -> int:
        return self._inbox.qsize()

    def __del__(self):  # Serve's multiplexer calls this when it evicts the model
        self.shutdown()

    # ------------------------------------------------------------------ engine thread

    def _run(self) -> None:
        import mlx.core as mx

        try:
            self._load()
        except BaseException as e:  # reported to start()
            self._load_error = e
            self._loaded.set()
            return
        self._loaded.set()
        try:
            self._serve()
        finally:
            self._fail_remaining()
            self._release()
            gc.collect()
            mx.clear_cache()
            logger.info("%s engine for %s stopped and its memory released", self.kind.upper(), self.model_id)

    def _fail_remaining(self) -> None:
        """Work still queued when the engine stops gets a 503 instead of waiting forever."""
        unloaded = APIError(503, f"Model '{self.model_id}' was unloaded", "service_unavailable")
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if item is not STOP:
                self._fail_queued(item, unloaded)

    def _load(self) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        """Take work from `self._inbox` until `STOP`."""
        raise NotImplementedError

    def _release(self) -> None:
        """Drop every reference to the model's arrays (the cache is cleared afterwards)."""
        self._model = None

    def _fail_queued(self, item: Any, error: APIError) -> None:
        """Answer one item that was queued but never served."""
