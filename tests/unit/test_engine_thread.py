"""The engine-thread base every slot engine shares: load errors reach start(), queued work
is answered when the engine stops, a dead thread is noticed, shutdown is idempotent."""

from __future__ import annotations

import asyncio
import threading

import pytest

from deployments.engine_thread import STOP, EngineThread
from deployments.protocol.errors import APIError


class EchoEngine(EngineThread):
    """Serves (value, future, loop) items; blocks on `gate` first so work can pile up."""

    kind = "echo"

    def __init__(self, model_id, model_dir, fail_load=False):
        super().__init__(model_id, model_dir)
        self.fail_load = fail_load
        self.gate = threading.Event()
        self.released = False

    def _load(self):
        if self.fail_load:
            raise RuntimeError("no such model")
        self._model = object()

    def _serve(self):
        self.gate.wait()
        while (item := self._inbox.get()) is not STOP:
            value, future, loop = item
            if value == "crash":
                raise RuntimeError("engine thread crashed")
            loop.call_soon_threadsafe(future.set_result, value)

    def _release(self):
        self._model = None
        self.released = True

    def _fail_queued(self, item, error):
        _, future, loop = item
        loop.call_soon_threadsafe(future.set_exception, error)

    def submit(self, value):
        self._ensure_open()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._inbox.put((value, future, loop))
        return future


async def test_serves_work_and_shutdown_is_idempotent(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    engine.gate.set()
    assert await engine.submit("hello") == "hello"
    engine.shutdown()
    engine.shutdown()
    assert engine.closed and engine.released and not engine.thread_died()
    with pytest.raises(APIError) as e:
        engine.submit("late")
    assert e.value.status_code == 503 and "unloading" in e.value.message


async def test_a_load_error_reaches_start(tmp_path):
    with pytest.raises(RuntimeError, match="no such model"):
        await EchoEngine.start("m", tmp_path, fail_load=True)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the crash is the point
async def test_work_queued_behind_a_crash_gets_a_503_not_a_hang(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    crash = engine.submit("crash")
    waiting = [engine.submit(i) for i in range(3)]
    engine.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
    assert all(isinstance(r, APIError) and r.status_code == 503 for r in results)
    assert "was unloaded" in results[0].message
    assert not crash.done()  # the item that crashed the loop is the engine's own business
    engine._thread.join(5)
    assert engine.thread_died() and engine.released
