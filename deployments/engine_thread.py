"""The base of every slot engine: one MLX model owned by one thread, and the one bridge between
that thread and the replica's asyncio loop.

MLX work for a model runs on a single thread: that thread loads the model, serves the messages
the replica's asyncio loop puts in its inbox, and on shutdown drops the model and clears MLX's
cache so an unload or an eviction really frees memory.

The asyncio side talks to the thread in one way only: it builds a `Message` (a dataclass of the
engine's own) and hands it over with

- `submit(message)`: an `asyncio.Future` for the one answer (ASR batches, image jobs), or
- `stream(message, merge)`: an async iterator over what the engine thread sends (LLM deltas,
  TTS audio). When the producer gets ahead of the consumer, the consumer takes everything
  pending in one step, combined by `merge` (as vLLM's RequestOutputCollector does), instead
  of one await per item.

An engine that answers many messages per step (the LLM's batch) wraps the step in
`replies_batched()`: what it sends during the step reaches each event loop in one wake-up,
not one per item (each wake-up is a write to the loop's self-pipe and a turn of the loop).

Either way an error on the engine thread is raised in the caller, and a caller that leaves
(cancelled task, closed iterator) sets `message.cancelled`, which the engine thread reads
between steps to stop the work. Work still queued when the engine stops is answered with a
503. A slot engine subclasses `EngineThread` and supplies `_load`, `_release` and either
`_handle` (one message at a time) or `_serve` (its own loop over the inbox, as the LLM's
continuous batching). `SlotEngine` is what a slot deployment may use on any engine.

No Ray here.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import queue
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Optional, Protocol, Self, TypeVar, runtime_checkable

from deployments.protocol.errors import APIError

logger = logging.getLogger(__name__)
# Serve's replica logger: an engine's stop is one of the few lines an idle graph logs
# (deployments/control/replica_models.py logs the loads).
lifecycle = logging.getLogger("ray.serve")

T = TypeVar("T")


class Stop:
    """The inbox message shutdown() sends: the engine loop returns when it takes it."""


STOP = Stop()


@runtime_checkable
class SlotEngine(Protocol):
    """What a slot deployment (and ReplicaModels) may use on any engine. Each slot's engine adds
    its own work methods (`generate`, `synthesize`, `transcribe`, ...) on top of the bridge."""

    model_id: str
    stats: Any  # the engine's counters, written by its thread

    @classmethod
    async def start(cls, model_id: str, model_dir: Path, *args: Any, **kwargs: Any) -> Self:
        """Build the engine; returns once its thread has loaded the model (or raises why not)."""
        ...

    @property
    def closed(self) -> bool: ...

    def shutdown(self) -> None: ...

    def thread_died(self) -> bool: ...

    def check_health(self) -> None: ...

    def pending(self) -> int: ...


# ---------------------------------------------------------------------- messages and replies


# Replies held back by the engine thread while `replies_batched()` runs: loop -> calls.
_held = threading.local()


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
        pass


def _run_all(calls: list[tuple[Callable[..., None], tuple]]) -> None:
    for fn, args in calls:
        fn(*args)


class _Reply:
    """The way back from the engine thread to one caller's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        held = getattr(_held, "calls", None)
        if held is None:
            _call_soon(self._loop, fn, *args)
        else:
            held.setdefault(self._loop, []).append((fn, args))

    def send(self, item: Any) -> None:
        raise TypeError("send() is for streamed messages; a submitted message gets one answer")

    def finish(self, result: Any) -> None:
        raise NotImplementedError

    def fail(self, error: BaseException) -> None:
        raise NotImplementedError


class _Nowhere(_Reply):
    """The answers of a message nobody waits for (a sharded replica's other ranks replay rank
    0's requests; only rank 0 answers)."""

    def __init__(self):
        pass

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        pass

    def send(self, item: Any) -> None:
        pass

    def finish(self, result: Any) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        pass


class _FutureReply(_Reply):
    def __init__(self, loop: asyncio.AbstractEventLoop):
        super().__init__(loop)
        self.future: asyncio.Future = loop.create_future()

    def finish(self, result: Any) -> None:
        self._call(self._settle, result, None)

    def fail(self, error: BaseException) -> None:
        self._call(self._settle, None, error)

    def _settle(self, result: Any, error: Optional[BaseException]) -> None:
        if self.future.done():  # cancelled by the caller, or answered already
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)


class _Collector(_Reply):
    """A stream's items on the caller's loop, waiting to be taken (all at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        super().__init__(loop)
        self._items: list[Any] = []
        self._error: Optional[BaseException] = None
        self._ready = asyncio.Event()
        self.closed = False  # the engine thread sent its last item (or its error)

    def send(self, item: Any) -> None:
        self._call(self._put, item)

    def finish(self, result: Any) -> None:
        self._call(self._close, None)

    def fail(self, error: BaseException) -> None:
        self._call(self._close, error)

    def _put(self, item: Any) -> None:
        if not self.closed:
            self._items.append(item)
            self._ready.set()

    def _close(self, error: Optional[BaseException]) -> None:
        if not self.closed:
            self.closed, self._error = True, error
            self._ready.set()

    async def take(self) -> list[Any]:
        """Every item pending (waiting for one if none is); [] once the stream has ended.
        Items sent before an error are handed out before the error is raised."""
        while not self._items and not self.closed:
            self._ready.clear()
            await self._ready.wait()
        if self._items:
            items, self._items = self._items, []
            return items
        if self._error is not None:
            raise self._error
        return []


@dataclass(eq=False)
class Message:
    """Base of an engine's inbox messages: the engine's own fields, plus `cancelled`, which
    the engine thread reads between steps: it is set when the caller left (or an operator
    aborts). The bridge attaches the way back to the caller; the engine thread answers
    through EngineThread's `_send`, `_finish` and `_fail` (so no field name can shadow them)."""

    cancelled: bool = field(default=False, init=False, repr=False)
    _reply: Optional[_Reply] = field(default=None, init=False, repr=False)

    def _attach(self, reply: _Reply) -> None:
        if self._reply is not None:
            raise RuntimeError(f"{type(self).__name__} was already handed to an engine")
        self._reply = reply


M = TypeVar("M", bound=Message)


def unloaded(model_id: str) -> APIError:
    return APIError(503, f"Model '{model_id}' was unloaded", "service_unavailable")


# ---------------------------------------------------------------------- the engine


class EngineThread(Generic[M]):
    """Create with `await Engine.start(...)`, release with `shutdown()`."""

    kind = "mlx"  # names the thread and the log lines: llm, asr, tts, image, embeddings, vlm

    def __init__(self, model_id: str, model_dir: Path):
        self.model_id = model_id
        self.model_dir = Path(model_dir)
        self._inbox: queue.SimpleQueue[M | Stop] = queue.SimpleQueue()
        self._loaded = threading.Event()
        self._load_error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=f"mlx-{self.kind}:{model_id}", daemon=True)
        self._closed = False
        self._stopped = False  # the engine loop has ended: nothing put in the inbox is served
        self.failure: Optional[BaseException] = None  # what ended the engine loop, if it did not just stop
        self._streams: set[_Collector] = set()  # streams being answered (fail_streams ends them)
        self._put_lock = threading.Lock()  # orders a put against the loop's end and final drain

    @classmethod
    async def start(cls, *args: Any, **kwargs: Any) -> Self:
        """Construct the engine and wait (off the event loop) until its thread has loaded the model."""
        engine = cls(*args, **kwargs)
        engine._thread.start()
        await asyncio.to_thread(engine._loaded.wait)
        if engine._load_error is not None:
            raise engine._load_error
        return engine

    # ------------------------------------------------------------------ asyncio side

    def submit(self, message: M) -> asyncio.Future:
        """Queue `message`; the future gets the engine thread's answer (or its error).
        Cancelling the future (or the task awaiting it) sets `message.cancelled`."""
        reply = _FutureReply(asyncio.get_running_loop())
        message._attach(reply)

        def on_done(future: asyncio.Future) -> None:
            if future.cancelled():
                message.cancelled = True

        reply.future.add_done_callback(on_done)
        self._put(message)
        return reply.future

    async def stream(self, message: M, merge: Optional[Callable[[list[T]], T]] = None) -> AsyncIterator[T]:
        """Queue `message` and yield what the engine thread sends for it. With `merge`, items
        that piled up while the consumer was busy come as one, `merge(items)`. Leaving the loop
        early (or being cancelled) sets `message.cancelled`."""
        collector = _Collector(asyncio.get_running_loop())
        message._attach(collector)
        self._put(message)
        self._streams.add(collector)
        try:
            while items := await collector.take():
                if merge is None:
                    for item in items:
                        yield item
                else:
                    yield items[0] if len(items) == 1 else merge(items)
        finally:
            self._streams.discard(collector)
            if not collector.closed:
                message.cancelled = True

    def fail_streams(self, error: BaseException) -> None:
        """End every stream being answered with `error`, from the event loop: for an engine
        thread that cannot answer any more (stuck in a collective with a rank that is gone)."""
        for collector in list(self._streams):
            collector._close(error)

    @staticmethod
    def answer_nowhere(message: M) -> M:
        """A message this thread makes itself and whose answers go nowhere."""
        message._attach(_Nowhere())
        return message

    def _put(self, message: M) -> None:
        """Queue a message, or raise a 503 at once if the engine will never serve it."""
        with self._put_lock:
            if self._closed:
                raise APIError(503, f"Model '{self.model_id}' is unloading", "service_unavailable")
            if self._stopped:
                raise APIError(503, f"The engine for model '{self.model_id}' has stopped", "service_unavailable")
            self._inbox.put(message)

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

    def check_health(self) -> None:
        """Raise if the engine thread died: its replica cannot serve this model any more."""
        if self.thread_died():
            raise RuntimeError(f"{self.kind} engine thread for {self.model_id} died")

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
        except BaseException as e:
            self.failure = e
            raise
        finally:
            with self._put_lock:
                self._stopped = True
            self._fail_remaining()
            self._release()
            gc.collect()
            mx.clear_cache()
            lifecycle.info(
                "%s engine for %s unloaded: stopped and its memory released", self.kind.upper(), self.model_id
            )

    def _fail_remaining(self) -> None:
        """Work still queued when the engine stops gets a 503 instead of waiting forever."""
        error = unloaded(self.model_id)
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return
            if message is not STOP:
                self._fail(message, error)

    def _serve(self) -> None:
        """Take messages from the inbox until `STOP`, one at a time: a message the caller
        abandoned while it waited is skipped; `_handle`'s return value answers it, and what it
        raises is raised in the caller (the thread goes on serving)."""
        while (message := self._inbox.get()) is not STOP:
            if message.cancelled:
                continue
            try:
                result = self._handle(message)
            except Exception as e:  # one bad message must not kill the thread
                if not isinstance(e, APIError):
                    logger.exception(
                        "%s engine for %s: %s failed", self.kind.upper(), self.model_id, type(message).__name__
                    )
                self._fail(message, e)
            else:
                self._finish(message, result)

    @staticmethod
    @contextlib.contextmanager
    def replies_batched():
        """Hold what this thread sends until the block ends, then wake each event loop once
        with all of it, in order."""
        if getattr(_held, "calls", None) is not None:  # nested: the outer block sends
            yield
            return
        _held.calls = {}
        try:
            yield
        finally:
            held, _held.calls = _held.calls, None
            for loop, calls in held.items():
                _call_soon(loop, _run_all, calls)

    @staticmethod
    def _send(message: M, item: Any) -> None:
        """One item of a streamed answer."""
        message._reply.send(item)

    @staticmethod
    def _finish(message: M, result: Any = None) -> None:
        """The answer of a submitted message; the end of a streamed one."""
        message._reply.finish(result)

    @staticmethod
    def _fail(message: M, error: BaseException) -> None:
        """Raise `error` in the caller."""
        message._reply.fail(error)

    def _handle(self, message: M) -> Any:
        """Do one message's work (sending its items, for a stream); return its answer."""
        raise NotImplementedError

    def _load(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """Drop every reference to the model's arrays (the cache is cleared afterwards)."""
        model, self._model = self._model, None
        drop_weights(model)


def drop_weights(model: Any) -> None:
    """Empty an MLX model's modules in place, so that an unload frees the weights even where a
    reference to the model object outlives its engine: an aborted synthesis's suspended generator,
    or a stored traceback whose frames hold `self`, kept Kokoro's 312 MiB alive after an unload
    (the replica's next load then held both copies). Anything else is left to the collector."""
    try:
        import mlx.nn as nn
    except ImportError:  # the engine-thread machinery without MLX (in-process fakes)
        return
    if isinstance(model, nn.Module):
        for module in list(model.modules()):
            module.clear()
