"""The engine-thread base every slot engine shares: load errors reach start(), queued work
is answered when the engine stops, a dead thread is noticed, shutdown is idempotent; and the
bridge: submit() answers or raises in the caller, stream() hands out items in order and merges
what piled up, a caller that leaves tells the engine thread, which stops the work."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import pytest

from deployments.engine_thread import EngineThread, Message, SlotEngine
from deployments.protocol.errors import APIError, invalid_request


class Crash(BaseException):
    """Escapes the engine loop's per-message handling: the thread dies, as on a fatal error."""


@dataclass(eq=False)
class Echo(Message):
    value: object


@dataclass(eq=False)
class Count(Message):
    """Streams [0], [1], ... [n-1], waiting for `gate` after the first; then fails if `fail`."""

    n: int
    fail: bool = False
    gate: threading.Event = field(default_factory=threading.Event)
    sent_all: threading.Event = field(default_factory=threading.Event)


@dataclass(eq=False)
class Endless(Message):
    """Sends items (or, submitted, just works) until cancelled."""

    streamed: bool = True
    steps: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)


class EchoEngine(EngineThread):
    """Blocks on `gate` before serving, so work can pile up."""

    kind = "echo"

    def __init__(self, model_id, model_dir, fail_load=False):
        super().__init__(model_id, model_dir)
        self.fail_load = fail_load
        self.gate = threading.Event()
        self.released = False
        self.handled: list[Message] = []
        self.stats = {"handled": 0}

    def _load(self):
        if self.fail_load:
            raise RuntimeError("no such model")
        self._model = object()

    def _serve(self):
        self.gate.wait()
        super()._serve()

    def _handle(self, message):
        self.handled.append(message)
        self.stats["handled"] += 1
        if isinstance(message, Echo):
            return self._echo(message.value)
        if isinstance(message, Count):
            return self._count(message)
        return self._endless(message)

    @staticmethod
    def _echo(value):
        if value == "crash":
            raise Crash()
        if isinstance(value, Exception):
            raise value
        return value

    def _count(self, message: Count) -> None:
        for i in range(message.n):
            self._send(message, [i])
            if i == 0:
                message.gate.wait(10)
        message.sent_all.set()
        if message.fail:
            raise ValueError(f"failed after {message.n}")

    def _endless(self, message: Endless) -> None:
        while not message.cancelled and message.steps < 10_000:
            message.steps += 1
            if message.streamed:
                self._send(message, message.steps)
            time.sleep(0.002)
        message.stopped.set()

    def _release(self):
        self._model = None
        self.released = True


@pytest.fixture
async def engine(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    engine.gate.set()
    yield engine
    engine.shutdown()


async def test_serves_work_and_shutdown_is_idempotent(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    engine.gate.set()
    assert await engine.submit(Echo("hello")) == "hello"
    engine.shutdown()
    engine.shutdown()
    assert engine.closed and engine.released and not engine.thread_died()
    with pytest.raises(APIError) as e:
        engine.submit(Echo("late"))
    assert e.value.status_code == 503 and "unloading" in e.value.message


async def test_a_load_error_reaches_start(tmp_path):
    with pytest.raises(RuntimeError, match="no such model"):
        await EchoEngine.start("m", tmp_path, fail_load=True)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the crash is the point
async def test_work_queued_behind_a_crash_gets_a_503_not_a_hang(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    assert isinstance(engine, SlotEngine)
    crash = engine.submit(Echo("crash"))
    waiting = [engine.submit(Echo(i)) for i in range(3)]
    streamed = asyncio.create_task(anext(engine.stream(Count(2))))
    await asyncio.sleep(0)  # the stream's message is queued when it is first awaited
    engine.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*waiting, streamed, return_exceptions=True), 10)
    assert all(isinstance(r, APIError) and r.status_code == 503 for r in results)
    assert "was unloaded" in results[0].message
    assert not crash.done()  # the item that crashed the loop is the engine's own business
    engine._thread.join(5)
    assert engine.thread_died() and engine.released
    with pytest.raises(RuntimeError, match="echo engine thread for m died"):
        engine.check_health()
    with pytest.raises(APIError, match="has stopped"):  # later work is refused, not left hanging
        engine.submit(Echo("after the crash"))


async def test_an_error_is_raised_in_the_caller_and_the_thread_goes_on(engine):
    with pytest.raises(ValueError, match="bad input"):
        await engine.submit(Echo(ValueError("bad input")))
    with pytest.raises(APIError) as e:
        await engine.submit(Echo(invalid_request("no such voice", "voice")))
    assert e.value.status_code == 400 and e.value.param == "voice"
    engine.check_health()
    assert await engine.submit(Echo(42)) == 42


async def test_a_message_goes_to_one_engine_once(engine):
    message = Echo(1)
    assert await engine.submit(message) == 1
    with pytest.raises(RuntimeError, match="already handed"):
        engine.submit(message)


async def test_a_stream_yields_every_item_in_order_then_ends(engine):
    message = Count(5)
    message.gate.set()
    assert [item async for item in engine.stream(message)] == [[0], [1], [2], [3], [4]]
    engine.check_health()


async def test_items_that_piled_up_come_merged_in_one_step(engine):
    message = Count(50)
    items = engine.stream(message, merge=lambda lists: sum(lists, []))
    assert await anext(items) == [0]  # the consumer is ahead: one item, at once
    message.gate.set()
    await asyncio.to_thread(message.sent_all.wait, 10)  # now the producer is 49 items ahead
    assert [item async for item in items] == [list(range(1, 50))]


async def test_without_merge_piled_up_items_come_one_by_one(engine):
    message = Count(4)
    items = engine.stream(message)
    assert await anext(items) == [0]
    message.gate.set()
    await asyncio.to_thread(message.sent_all.wait, 10)
    assert [item async for item in items] == [[1], [2], [3]]


async def test_items_sent_before_an_error_arrive_before_it(engine):
    message, received = Count(3, fail=True), []
    message.gate.set()
    with pytest.raises(ValueError, match="failed after 3"):
        async for item in engine.stream(message, merge=lambda lists: sum(lists, [])):
            received.append(item)
    assert sum(received, []) == [0, 1, 2]
    assert not message.cancelled  # it ended on the engine thread: nothing to stop


async def test_a_consumer_that_leaves_stops_the_stream_on_the_engine_thread(engine):
    message = Endless()
    items = engine.stream(message)
    assert await anext(items) == 1
    await items.aclose()
    assert message.cancelled
    assert await asyncio.to_thread(message.stopped.wait, 10)
    assert message.steps < 10_000  # stopped because it was told, not because it ran out
    assert await engine.submit(Echo("next")) == "next"  # and the engine serves the next one


async def test_cancelling_a_submit_stops_the_running_work(engine):
    message = Endless(streamed=False)
    task = asyncio.create_task(asyncio.wait_for(engine.submit(message), 30))
    while message.steps == 0:
        await asyncio.sleep(0.01)
    task.cancel()
    assert await asyncio.to_thread(message.stopped.wait, 10) and message.cancelled
    assert message.steps < 10_000
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_work_abandoned_while_queued_never_runs(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    try:
        kept, dropped = Echo("kept"), Echo("dropped")
        kept_future, dropped_future = engine.submit(kept), engine.submit(dropped)
        dropped_future.cancel()
        await asyncio.sleep(0)  # the loop runs the future's done callbacks
        engine.gate.set()
        assert await kept_future == "kept"
        assert await engine.submit(Echo("after")) == "after"
        assert dropped.cancelled and dropped not in engine.handled
    finally:
        engine.shutdown()


async def test_an_answer_for_a_closed_event_loop_does_not_kill_the_thread(tmp_path):
    engine = await EchoEngine.start("m", tmp_path)
    try:

        def submit_and_leave():
            async def leave():
                engine.submit(Echo("nobody waits"))  # its loop closes before the answer

            asyncio.run(leave())

        await asyncio.to_thread(submit_and_leave)
        engine.gate.set()
        assert await engine.submit(Echo("still serving")) == "still serving"
        engine.check_health()
    finally:
        engine.shutdown()


class LinearEngine(EchoEngine):
    """A real MLX model: one 1024x1024 float32 layer (4 MiB of arrays)."""

    def _load(self):
        import mlx.core as mx
        import mlx.nn as nn

        self._model = nn.Linear(1024, 1024)
        mx.eval(self._model.parameters())

    def _release(self):
        EngineThread._release(self)


async def test_an_unload_frees_the_weights_while_something_still_holds_the_model(tmp_path):
    """A suspended generator or a stored traceback of an aborted job can keep the model object
    alive past its engine; shutdown empties its modules, so the memory goes anyway."""
    import gc

    import mlx.core as mx

    engine = await LinearEngine.start("linear", tmp_path)
    engine.gate.set()
    held = engine._model  # what a leaked frame would hold
    gc.collect()
    before = mx.get_active_memory()
    engine.shutdown()
    assert before - mx.get_active_memory() >= 1024 * 1024 * 4
    assert dict(held.parameters()) == {}
