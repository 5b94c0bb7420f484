"""OpenAI's Conversations API in process, driven by the openai SDK over fake slots: a
conversation's life (create with items, retrieve, update, items added, listed page by page,
retrieved and deleted, the conversation deleted and then a 404 everywhere), a Responses request
that names it (its items answered, its turn appended, streamed or not; a failed answer appends
nothing), the Agents SDK's OpenAIConversationsSession remembering a turn, concurrent writers
all kept, and the bad inputs: a 4xx in OpenAI's shape."""

from __future__ import annotations

import asyncio

import openai
import pytest

from deployments.ingress.serving.conversations import ServingConversations
from deployments.records import CONVERSATIONS, RecordConflict
from tests.assertions import assert_openai_error
from tests.ingress import fakes
from tests.ingress.test_responses import MODEL, chat_request, failing_answer


@pytest.fixture
def client(http) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="unused", base_url="http://t/v1", http_client=http, max_retries=0)


def said(messages) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in messages]


async def test_a_conversation_and_its_items_through_the_sdk(client):
    conv = await client.conversations.create(
        items=[{"role": "user", "content": "Hi"}, {"type": "message", "role": "assistant", "content": "Hello"}],
        metadata={"topic": "greeting"},
    )
    assert conv.id.startswith("conv_") and conv.object == "conversation" and conv.metadata == {"topic": "greeting"}
    assert (await client.conversations.retrieve(conv.id)).created_at == conv.created_at
    updated = await client.conversations.update(conv.id, metadata={"topic": "weather"})
    assert updated.metadata == {"topic": "weather"}
    added = await client.conversations.items.create(
        conv.id, items=[{"role": "user", "content": f"Question {i}"} for i in range(3)]
    )
    assert [item.content[0].text for item in added.data] == ["Question 0", "Question 1", "Question 2"]
    assert all(item.id for item in added.data)
    # Listed two at a time: the SDK follows `after` from page to page.
    texts = [item.content[0].text async for item in client.conversations.items.list(conv.id, limit=2, order="asc")]
    assert texts == ["Hi", "Hello", "Question 0", "Question 1", "Question 2"]
    newest = await client.conversations.items.list(conv.id, limit=1)
    assert newest.data[0].content[0].text == "Question 2" and newest.has_more
    one = await client.conversations.items.retrieve(added.data[1].id, conversation_id=conv.id)
    assert one.content[0].text == "Question 1" and one.role == "user"
    after = await client.conversations.items.delete(added.data[1].id, conversation_id=conv.id)
    assert after.id == conv.id and after.object == "conversation"
    left = [item.content[0].text async for item in client.conversations.items.list(conv.id, order="asc")]
    assert left == ["Hi", "Hello", "Question 0", "Question 2"]
    deleted = await client.conversations.delete(conv.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (conv.id, True, "conversation.deleted")
    for call in (
        client.conversations.retrieve(conv.id),
        client.conversations.delete(conv.id),
        client.conversations.items.list(conv.id),
        client.conversations.items.create(conv.id, items=[{"role": "user", "content": "x"}]),
        client.responses.create(model=MODEL, input="x", conversation=conv.id),
    ):
        with pytest.raises(openai.NotFoundError) as info:
            await call
        assert info.value.body["code"] == "conversation_not_found"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_response_in_a_conversation_answers_its_items_and_appends_its_turn(client, slots, stream):
    conv = await client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    slots["llm"].answers["chat"] = fakes.generation("Hello Ada")
    ask = dict(model=MODEL, input="What is my name?", instructions="Be brief.", conversation=conv.id)
    if stream:
        async with client.responses.stream(**ask) as events:
            response = await events.get_final_response()
    else:
        response = await client.responses.create(**ask)
    assert response.conversation.id == conv.id and response.output_text == "Hello Ada"
    assert said(chat_request(slots).messages) == [
        ("system", "Be brief."),
        ("user", "My name is Ada."),
        ("user", "What is my name?"),
    ]
    items = [item async for item in client.conversations.items.list(conv.id, order="asc")]
    assert [(i.role, i.content[0].text) for i in items] == [
        ("user", "My name is Ada."),
        ("user", "What is my name?"),
        ("assistant", "Hello Ada"),
    ]
    assert items[-1].id == response.output[0].id  # the response's own output item
    slots["llm"].answers["chat"] = failing_answer  # a failed answer adds nothing
    with pytest.raises(openai.APIError):
        await client.responses.create(model=MODEL, input="Again?", conversation={"id": conv.id})
    assert len([item async for item in client.conversations.items.list(conv.id)]) == 3


async def test_an_agents_sdk_session_on_a_conversation_remembers_the_earlier_turn(client, slots):
    from agents import Agent, OpenAIConversationsSession, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    agent = Agent(
        name="memory", instructions="Be brief.", model=OpenAIResponsesModel(model=MODEL, openai_client=client)
    )
    session = OpenAIConversationsSession(openai_client=client)
    slots["llm"].answers["chat"] = fakes.generation("Hello Ada")
    await Runner.run(agent, "My name is Ada.", session=session)
    slots["llm"].answers["chat"] = fakes.generation("Your name is Ada")
    result = await Runner.run(agent, "What is my name?", session=session)
    assert result.final_output == "Your name is Ada"
    assert said(chat_request(slots).messages) == [
        ("system", "Be brief."),
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada"),
        ("user", "What is my name?"),
    ]
    assert [item["role"] for item in await session.get_items()] == ["user", "assistant", "user", "assistant"]
    assert (await session.pop_item())["content"][0]["text"] == "Your name is Ada"
    await session.clear_session()


async def test_writers_that_race_keep_every_item(state):
    """Another writer between a read and its write: the write is refused at the version it read,
    read again and applied again; nothing is lost."""
    serving = ServingConversations(state)
    conv = await serving.create({"items": [{"role": "user", "content": "0"}]})
    records, real_put = serving.records, serving.records.put
    raced = []

    async def put_after_a_rival(namespace, key, value, expected_version=None):
        if namespace == CONVERSATIONS and not raced:
            raced.append(key)
            rival = (await records.get(namespace, key)).value
            rival["items"].append(
                {"id": "rival", "type": "message", "role": "user", "content": [], "status": "completed"}
            )
            await real_put(namespace, key, rival)
        return await real_put(namespace, key, value, expected_version)

    records.put = put_after_a_rival
    await serving.add_items(conv["id"], {"items": [{"role": "user", "content": "1"}]})
    items = (await serving.stored(conv["id"]))["items"]
    assert raced and [i["id"] for i in items][1] == "rival" and items[2]["content"][0]["text"] == "1"
    records.put = real_put
    await asyncio.gather(
        *(serving.add_items(conv["id"], {"items": [{"role": "user", "content": f"{n}"}]}) for n in range(8))
    )
    assert len((await serving.stored(conv["id"]))["items"]) == 11


async def test_a_writer_that_always_loses_gets_the_conflict(state):
    serving = ServingConversations(state)
    conv = await serving.create({})
    real_put = serving.records.put

    async def always_moved_on(namespace, key, value, expected_version=None):
        raise RecordConflict("moved on")

    serving.records.put = always_moved_on
    with pytest.raises(RecordConflict):
        await serving.add_items(conv["id"], {"items": [{"role": "user", "content": "x"}]})
    serving.records.put = real_put


@pytest.mark.parametrize(
    "path, body, status, param",
    [
        ("/v1/conversations", {"items": [{"role": "user", "content": "x"}] * 21}, 400, "items"),
        ("/v1/conversations", {"items": [{"role": "robot", "content": "x"}]}, 400, "items"),
        ("/v1/conversations", {"items": [{"type": "web_search_call"}]}, 400, "items"),
        ("/v1/conversations", {"metadata": {"k": "v" * 513}}, 400, "metadata"),
        ("/v1/conversations/{id}/items", {"items": []}, 400, "items"),
        ("/v1/conversations/{id}/items", {}, 400, "items"),
        ("/v1/conversations/{id}", {}, 400, "metadata"),
    ],
)
async def test_bad_requests_are_openai_errors(http, path, body, status, param):
    conv = (await http.post("/v1/conversations", json={})).json()
    r = await http.post(path.replace("{id}", conv["id"]), json=body)
    assert_openai_error(r, status, param=param)


async def test_unknown_items_and_cursors(http):
    conv = (await http.post("/v1/conversations", json={"items": [{"role": "user", "content": "x"}]})).json()
    for r in (
        await http.get(f"/v1/conversations/{conv['id']}/items/msg_nope"),
        await http.delete(f"/v1/conversations/{conv['id']}/items/msg_nope"),
    ):
        assert_openai_error(r, 404, param="item_id", code="item_not_found")
    r = await http.get(f"/v1/conversations/{conv['id']}/items", params={"after": "msg_nope"})
    assert_openai_error(r, 400, param="after")
