"""Background responses in process, through the openai SDK over fake slots: answered at once in
progress, polled to the end with the output growing on the way, cancelled (here, or by another
replica through the record, seen at the next heartbeat: the generation is aborted either way),
a failure recorded as a failed response, a runner gone (its replica died) reported as failed
when read, and what cannot be a background response refused by name."""

from __future__ import annotations

import asyncio
import time

import openai
import pytest

from deployments.ingress.serving import background
from deployments.records import RESPONSES
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.test_responses import MODEL, failing_answer

WORDS = "one two three four five six seven eight"


@pytest.fixture(autouse=True)
def quick_heartbeat(monkeypatch):
    monkeypatch.setattr(background, "HEARTBEAT_S", 0.05)


@pytest.fixture
def client(http) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=http, max_retries=0)


async def poll(client, response_id: str, until=lambda r: r.status not in ("queued", "in_progress"), timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while True:
        r = await client.responses.retrieve(response_id)
        if until(r) or time.monotonic() > deadline:
            return r
        await asyncio.sleep(0.02)


async def test_a_background_response_is_polled_to_its_end_with_its_output_growing(client, slots):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.05)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    assert r.status == "in_progress" and r.background is True and r.output == []
    partial = await poll(client, r.id, until=lambda r: r.output_text.count(" ") >= 2)
    assert partial.status == "in_progress" and WORDS.startswith(partial.output_text)  # the text so far
    done = await poll(client, r.id)
    assert done.status == "completed" and done.output_text == WORDS and done.usage.output_tokens == 8
    assert not slots["llm"].streams[-1].in_flight


async def test_a_cancel_stops_the_generation_and_is_idempotent(client, slots):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.2)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    cancelled = await client.responses.cancel(r.id)
    assert cancelled.status == "cancelled" and cancelled.id == r.id
    await asyncio.sleep(0.3)
    assert not slots["llm"].streams[-1].in_flight  # aborted, not left generating
    assert (await client.responses.retrieve(r.id)).status == "cancelled"
    assert (await client.responses.cancel(r.id)).status == "cancelled"  # again: the same answer


async def test_a_cancel_written_by_another_replica_stops_the_runner_at_its_next_heartbeat(client, slots, state):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.2)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    task = background.RUNNING.pop(r.id)  # as if another replica took the cancel: no local task to stop
    records = state.record_store()
    await background.cancel(records, r.id)
    await asyncio.wait_for(task, 2)  # the runner read the cancellation and stopped
    assert not slots["llm"].streams[-1].in_flight
    assert (await client.responses.retrieve(r.id)).status == "cancelled"


async def test_a_failure_while_generating_is_a_failed_response(client, slots):
    slots["llm"].answers["chat"] = failing_answer
    r = await client.responses.create(model=MODEL, input="Hi", background=True)
    failed = await poll(client, r.id)
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert "replica died" in failed.error.message


async def test_a_runner_that_stopped_is_reported_failed_when_read(client, slots, state):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.2)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    task = background.RUNNING[r.id]
    task.cancel()  # its replica died: no more heartbeats, no final write
    await asyncio.gather(task, return_exceptions=True)
    failed = await client.responses.retrieve(r.id)
    assert failed.status == "failed" and "stopped" in failed.error.message
    records = state.record_store()
    record = await records.get(RESPONSES, r.id)
    assert record.value["response"]["status"] == "failed"  # written back: every replica sees it


async def test_another_replicas_runner_is_failed_only_past_its_lease(client, slots, state, monkeypatch):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.2)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    background.RUNNING.pop(r.id).cancel()
    records = state.record_store()
    value = (await records.get(RESPONSES, r.id)).value
    value["background"] = {"owner": "another-replica", "heartbeat": time.time()}
    await records.put(RESPONSES, r.id, value)
    assert (await client.responses.retrieve(r.id)).status == "in_progress"  # its heartbeat is fresh
    monkeypatch.setattr(background, "LEASE_S", 0.0)
    assert (await client.responses.retrieve(r.id)).status == "failed"


async def test_a_background_turn_of_a_conversation_is_appended_when_it_completes(client, slots):
    conv = await client.conversations.create(items=[{"role": "user", "content": "Hi"}])
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation("Hello"), 0.05)
    r = await client.responses.create(model=MODEL, input="Again", conversation=conv.id, background=True)
    assert (await poll(client, r.id)).status == "completed"
    items = [i async for i in client.conversations.items.list(conv.id, order="asc")]
    assert [(i.role, i.content[0].text) for i in items] == [("user", "Hi"), ("user", "Again"), ("assistant", "Hello")]


async def test_continuing_a_response_still_in_progress_is_a_400(client, slots, http):
    slots["llm"].answers["chat"] = fakes.slowly(fakes.generation(WORDS), 0.2)
    r = await client.responses.create(model=MODEL, input="Count.", background=True)
    answer = await http.post("/v1/responses", json={"model": MODEL, "input": "More", "previous_response_id": r.id})
    assert_openai_error(answer, 400, param="previous_response_id")
    await client.responses.cancel(r.id)


@pytest.mark.parametrize("fields, param", [({"stream": True}, "stream"), ({"store": False}, "store")])
async def test_what_cannot_run_in_the_background_is_refused_by_name(http, slots, fields, param):
    r = await http.post("/v1/responses", json={"model": MODEL, "input": "Hi", "background": True, **fields})
    assert_openai_error(r, 400, param=param)
    assert not slots["llm"].calls


async def test_only_a_background_response_can_be_cancelled(client, http):
    r = await client.responses.create(model=MODEL, input="Hi")
    assert_openai_error(await http.post(f"/v1/responses/{r.id}/cancel"), 400)
    assert_openai_error(await http.post("/v1/responses/resp_nope/cancel"), 404, code="response_not_found")
