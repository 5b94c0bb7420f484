"""The idle decision of one replica, on an injected clock: what is unloaded, when, and what
never is (the default while keep_default_loaded, a model a request holds, -1)."""

import asyncio

from deployments.control.idle import (
    MAX_CHECK_INTERVAL_S,
    IdlePolicy,
    ModelUse,
    describe,
    plan,
    timeout_s,
)
from deployments.protocol.keep_alive import FOREVER


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def book_with(clock: Clock, *models: str) -> ModelUse:
    book = ModelUse(clock)
    for model in models:
        book.loaded(model)
    return book


POLICY = IdlePolicy(idle_unload_s=60.0, keep_default_loaded=True)


def test_a_model_idle_past_its_timeout_is_unloaded():
    clock = Clock()
    book = book_with(clock, "default", "extra")
    clock.now += 59
    assert plan(clock.now, ["default", "extra"], book, "default", POLICY, {}).unload == []
    clock.now += 1
    assert plan(clock.now, ["default", "extra"], book, "default", POLICY, {}).unload == ["extra"]


def test_the_default_stays_while_keep_default_loaded():
    clock = Clock()
    book = book_with(clock, "default")
    clock.now += 10_000
    assert plan(clock.now, ["default"], book, "default", POLICY, {}).unload == []
    assert plan(clock.now, ["default"], book, "default", IdlePolicy(60.0, False), {}).unload == ["default"]
    # a client's keep_alive does not outrank the operator's choice
    assert timeout_s("default", "default", POLICY, {"default": 0.0}) is None


def test_never_when_the_slot_has_no_timeout():
    clock = Clock()
    book = book_with(clock, "extra")
    clock.now += 10_000
    for policy in (IdlePolicy(None), IdlePolicy(0.0)):
        assert plan(clock.now, ["extra"], book, "default", policy, {}).unload == []


def test_keep_alive_overrides_the_slot_timeout():
    clock = Clock()
    book = book_with(clock, "extra")
    clock.now += 3
    assert plan(clock.now, ["extra"], book, "default", POLICY, {"extra": 3.0}).unload == ["extra"]
    assert plan(clock.now, ["extra"], book, "default", IdlePolicy(None), {"extra": 3.0}).unload == ["extra"]
    clock.now += 100_000
    assert plan(clock.now, ["extra"], book, "default", POLICY, {"extra": FOREVER}).unload == []
    assert timeout_s("extra", "default", POLICY, {"extra": FOREVER}) is None


def test_keep_alive_zero_unloads_once_the_request_ends():
    clock = Clock()
    book = book_with(clock, "extra")
    book.begin("extra")
    clock.now += 5
    assert plan(clock.now, ["extra"], book, "default", POLICY, {"extra": 0.0}).unload == []
    book.end("extra")
    assert plan(clock.now, ["extra"], book, "default", POLICY, {"extra": 0.0}).unload == ["extra"]


def test_a_model_with_a_request_running_is_never_idle():
    clock = Clock()
    book = book_with(clock, "extra")
    book.begin("extra")
    book.begin("extra")
    clock.now += 10_000
    assert plan(clock.now, ["extra"], book, "default", POLICY, {}).unload == []
    book.end("extra")
    assert plan(clock.now, ["extra"], book, "default", POLICY, {}).unload == []
    book.end("extra")
    clock.now += 59
    assert plan(clock.now, ["extra"], book, "default", POLICY, {}).unload == []  # the clock restarted at the end
    clock.now += 1
    assert plan(clock.now, ["extra"], book, "default", POLICY, {}).unload == ["extra"]


def test_the_next_check_comes_at_the_next_deadline_or_within_the_interval():
    clock = Clock()
    book = book_with(clock, "extra")
    assert plan(clock.now, ["extra"], book, "default", POLICY, {"extra": 0.25}).check_in_s == 0.25
    assert plan(clock.now, ["extra"], book, "default", POLICY, {}).check_in_s == MAX_CHECK_INTERVAL_S


def test_the_book_forgets_what_it_no_longer_holds():
    clock = Clock()
    book = book_with(clock, "a", "b")
    book.begin("b")
    book.unloaded("a")
    book.unloaded("b")  # a request is loading it again: its lease stays
    assert "a" not in book.uses and book.busy("b")
    book.loaded("c")
    book.prune(["b"])
    assert set(book.uses) == {"b"}


async def test_a_lease_lasts_until_the_request_task_ends():
    clock = Clock()
    book = ModelUse(clock)
    release = asyncio.Event()

    async def request():
        book.lease("extra")
        await release.wait()

    task = asyncio.create_task(request())
    await asyncio.sleep(0)
    assert book.busy("extra")
    clock.now += 7
    release.set()
    await task
    await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    assert not book.busy("extra") and book.uses["extra"].last_used_at == clock.now


def test_status_says_since_when_and_until_when():
    clock = Clock(1000.0)
    book = book_with(clock, "default", "extra")
    clock.now = 1010.0
    book.begin("extra")
    book.end("extra")
    rows = {row["id"]: row for row in describe(["default", "extra"], book, "default", POLICY, {})}
    assert rows["default"] == {
        "id": "default",
        "loaded_at": 1000.0,
        "last_used_at": 1000.0,
        "in_use": 0,
        "idle_unload_s": None,
        "unload_at": None,
    }
    assert rows["extra"]["last_used_at"] == 1010.0
    assert rows["extra"]["idle_unload_s"] == 60.0 and rows["extra"]["unload_at"] == 1070.0
