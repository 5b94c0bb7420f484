"""The agent protocols on the real graph (the shipped config, the default SmolLM2 at temperature
0), each with its own client: the openai SDK's Responses API (create, previous_response_id, a
conversation, background responses, a function tool round trip, the event stream, retrieve and delete, a stored response outliving
the ingress replica), the OpenAI Agents SDK's Runner, and the anthropic SDK's Messages API. The
SDKs parse every response and event with their own types. Few requests, few tokens."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.assertions import wait_for

DEFAULT = "ominix-smollm2-135m-instruct"
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": CITY,
    "strict": True,
}
GREEDY = {"model": DEFAULT, "temperature": 0}


# ------------------------------------------------------------------ the openai SDK


def test_responses_create_continue_retrieve_delete(client):
    first = client.responses.create(input="My name is Ada. Say hello.", max_output_tokens=16, **GREEDY)
    assert first.status in ("completed", "incomplete") and first.output_text and first.model == DEFAULT
    second = client.responses.create(
        input="What is my name?", previous_response_id=first.id, max_output_tokens=16, **GREEDY
    )
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens  # the stored conversation came first
    items = client.responses.input_items.list(second.id, order="asc")
    assert [(item.type, item.role) for item in items.data] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert client.responses.retrieve(first.id).output_text == first.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="Again", previous_response_id=first.id, max_output_tokens=4, **GREEDY)


def test_a_conversation_holds_the_turns_of_its_responses(client):
    """The Conversations API on Control's record store: two responses that name the conversation
    answer its items and append their turns; the items list them in order."""
    conv = client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}], metadata={"app": "e2e"})
    first = client.responses.create(input="Say hello.", conversation=conv.id, max_output_tokens=8, **GREEDY)
    second = client.responses.create(input="What is my name?", conversation=conv.id, max_output_tokens=8, **GREEDY)
    assert first.conversation.id == second.conversation.id == conv.id
    assert second.usage.input_tokens > first.usage.input_tokens  # the first turn came before it
    items = list(client.conversations.items.list(conv.id, order="asc"))
    assert [(i.role, i.content[0].text) for i in items] == [
        ("user", "My name is Ada."),
        ("user", "Say hello."),
        ("assistant", first.output_text),
        ("user", "What is my name?"),
        ("assistant", second.output_text),
    ]
    assert client.conversations.retrieve(conv.id).metadata == {"app": "e2e"}
    client.conversations.delete(conv.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="Again", conversation=conv.id, max_output_tokens=4, **GREEDY)


def test_a_background_response_is_polled_and_another_cancelled(client):
    """`background: true` on the shipped graph: answered at once in progress, polled to its
    end; a long one cancelled stays cancelled (its runner stopped; nothing overwrote it)."""
    import time

    r = client.responses.create(input="Say hello.", max_output_tokens=8, background=True, **GREEDY)
    assert r.status in ("queued", "in_progress") and r.background
    done = wait_for(lambda: (x := client.responses.retrieve(r.id)).status not in ("queued", "in_progress") and x, 60)
    assert done.status in ("completed", "incomplete") and done.output_text and done.usage.output_tokens >= 1, done
    long = client.responses.create(input="Tell me a long story.", max_output_tokens=2000, background=True, **GREEDY)
    assert client.responses.cancel(long.id).status == "cancelled"
    time.sleep(3)  # longer than a heartbeat: a runner still going would have written its progress
    assert client.responses.retrieve(long.id).status == "cancelled"


def test_a_function_tool_round_trip(client):
    asked = client.responses.create(
        input="What is the weather in Paris?", tools=[WEATHER], tool_choice="required", max_output_tokens=64, **GREEDY
    )
    call = next(item for item in asked.output if item.type == "function_call")
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), CITY)
    answered = client.responses.create(
        previous_response_id=asked.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "sunny"}'}],
        max_output_tokens=32,
        **GREEDY,
    )
    assert answered.status in ("completed", "incomplete") and answered.output
    items = client.responses.input_items.list(answered.id, order="asc").data
    assert [item.type for item in items][-2:] == ["function_call", "function_call_output"]


def test_the_event_stream_in_the_sdks_order(client):
    with client.responses.stream(input="Count to three.", max_output_tokens=16, **GREEDY) as stream:
        events = list(stream)
    # The last event carries the response: `response.completed`, or `response.incomplete` when
    # the answer ran into max_output_tokens (the SDK's get_final_response() only takes the first).
    final = events[-1].response
    types = [event.type for event in events]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert "response.output_text.delta" in types
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed" if final.status == "completed" else "response.incomplete",
    ]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text
    assert client.responses.retrieve(final.id).output_text == final.output_text


def _replica_names(deployment: str) -> set[str]:
    import ray

    return {
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["name"].startswith(f"SERVE_REPLICA::ominix#{deployment}#")
    }


def test_a_stored_response_outlives_the_ingress_replica(client):
    """The store is Control's: the replica that stored the response dies, its replacement reads it."""
    import ray

    stored = client.responses.create(input="Remember me.", max_output_tokens=8, **GREEDY)
    replicas = _replica_names("Ingress")
    assert replicas, "no running Ingress replica"
    for name in replicas:
        ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)

    def read_back():
        if not (_replica_names("Ingress") - replicas):
            return None
        try:
            return client.responses.retrieve(stored.id)
        except openai.APIError:  # the proxy has no replica to send it to yet
            return None

    again = wait_for(read_back, timeout_s=180, interval=1)
    assert again.id == stored.id and again.output_text == stored.output_text
    assert _replica_names("Ingress").isdisjoint(replicas)  # Serve replaced the killed replica


# ------------------------------------------------------------------ the OpenAI Agents SDK


async def test_an_agent_calls_its_tool_and_answers(server):
    from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    called = []

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        called.append(city)
        return f"It is sunny in {city}."

    client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    agent = Agent(
        name="weather",
        instructions="Answer the question with the weather tool's result.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=DEFAULT, openai_client=client),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=64),
    )
    result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
    assert called and isinstance(result.final_output, str) and result.final_output


# ------------------------------------------------------------------ the anthropic SDK


@pytest.fixture(scope="module")
def claude(server):
    import anthropic

    return anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=60)


HI = [{"role": "user", "content": "Say hello."}]
SAMPLING = {"extra_body": {"temperature": 0}}  # not in the SDK's request type any more; honoured


def test_anthropic_messages_create_and_count_tokens(claude):
    m = claude.messages.create(model=DEFAULT, max_tokens=16, messages=HI, **SAMPLING)
    assert m.type == "message" and m.role == "assistant" and m.model == DEFAULT
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.output_tokens > 0
    count = claude.messages.count_tokens(model=DEFAULT, messages=HI)
    assert count.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)


def test_anthropic_messages_stream(claude):
    with claude.messages.stream(model=DEFAULT, max_tokens=16, messages=HI, **SAMPLING) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_start" in events and "content_block_stop" in events and "message_delta" in events
    assert final.content[0].text and final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) > 0


def test_anthropic_forced_tool_use_follows_the_schema(claude):
    tool = {"name": "get_weather", "description": "The weather in a city", "input_schema": CITY}
    m = claude.messages.create(
        model=DEFAULT,
        max_tokens=64,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        **SAMPLING,
    )
    use = next(block for block in m.content if block.type == "tool_use")
    assert use.name == "get_weather" and m.stop_reason == "tool_use"
    jsonschema.validate(use.input, CITY)
