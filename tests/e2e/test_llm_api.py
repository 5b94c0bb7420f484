"""The OpenAI text routes of the running graph, through the openai SDK and raw HTTP."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

MODEL = "ominix-tiny-qwen3"  # random weights: these tests check the code path, fast
DEFAULT = "ominix-smollm2-135m-instruct"
HELLO = [{"role": "user", "content": "Hello, how are you today?"}]


def chat(client, **kw):
    return client.chat.completions.create(**{"model": MODEL, "messages": HELLO, "temperature": 0, **kw})


def test_models_list(client):
    models = client.models.list()
    llm_cards = [m for m in models.data if m.model_extra["type"] == "llm"]  # other slots list theirs
    # the default first, then the allow-list, then OminiX-API's family names naming the default
    assert [m.id for m in llm_cards] == [DEFAULT, MODEL, "qwen3", "mistral", "glm"]
    assert {m.model_extra["alias_of"] for m in llm_cards[2:]} == {DEFAULT}


def test_chat_non_streaming(client, tiny_tokenizer):
    r = chat(client, max_tokens=12)
    choice = r.choices[0]
    assert r.object == "chat.completion" and r.model == MODEL and r.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    expected_prompt = tiny_tokenizer.apply_chat_template(HELLO, add_generation_prompt=True)
    assert r.usage.prompt_tokens == len(expected_prompt)
    assert r.usage.completion_tokens == 12
    assert r.usage.total_tokens == len(expected_prompt) + 12


def test_chat_streaming_is_incremental_and_matches_non_streaming(client):
    full = chat(client, max_tokens=16).choices[0].message.content
    chunks = list(chat(client, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) > 1, "tokens must arrive as they are generated, not in one piece"
    assert "".join(c.choices[0].delta.content for c in content_chunks) == full
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert len({c.id for c in chunks}) == 1


def test_sse_framing_on_the_wire(http):
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 4, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read().decode()
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    assert json.loads(events[0][6:])["choices"][0]["finish_reason"] is None


def test_text_completions(client, tiny_tokenizer):
    prompt = "The quick brown fox"
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(tiny_tokenizer.encode(prompt))
    assert r.usage.completion_tokens == 10
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(model=MODEL, prompt=prompt, max_tokens=10, temperature=0, stream=True)
        if c.choices
    )
    assert streamed == r.choices[0].text


def _ascii_window(text: str, size: int = 3) -> str:
    """A stop string that first occurs after the start and lies across token boundaries."""
    for i in range(4, len(text) - size):
        candidate = text[i : i + size]
        if candidate.isascii() and candidate.strip() == candidate and text.find(candidate) == i:
            return candidate
    pytest.skip("tiny model output has no usable ASCII window")


def test_stop_strings_end_the_output_and_are_not_included(client):
    prompt = "One two three"
    free = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0).choices[0].text
    stop = _ascii_window(free)
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, temperature=0, stop=[stop, "\x00never"])
    assert r.choices[0].text == free[: free.find(stop)]
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 40

    free_chat = chat(client, max_tokens=40).choices[0].message.content
    stop = _ascii_window(free_chat)
    streamed = list(chat(client, max_tokens=40, stop=stop, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == free_chat[: free_chat.find(stop)]
    assert streamed[-1].choices[0].finish_reason == "stop"


def test_tools_reach_the_chat_template(client, tiny_tokenizer):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = [{"role": "user", "content": "What is the weather in Paris? Call the tool."}]
    r = client.chat.completions.create(model=MODEL, messages=messages, tools=tools, max_tokens=8, temperature=0)
    expected = tiny_tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    assert r.usage.prompt_tokens == len(expected)
    # The random model does not call tools; the response must still be well-formed.
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")
    assert r.choices[0].message.content is not None or r.choices[0].message.tool_calls


def test_chat_template_kwargs_pass_through(client, tiny_tokenizer):
    r = chat(client, max_tokens=2, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    expected = tiny_tokenizer.apply_chat_template(HELLO, add_generation_prompt=True, enable_thinking=False)
    assert r.usage.prompt_tokens == len(expected)


def test_seed_reproduces_sampled_output(client):
    a = chat(client, max_tokens=12, temperature=1.0, seed=42).choices[0].message.content
    b = chat(client, max_tokens=12, temperature=1.0, seed=42).choices[0].message.content
    assert a == b


async def test_concurrent_streams_are_batched_without_changing_greedy_output(aclient):
    prompts = [f"Tell me about the number {i} and the river" for i in range(8)]

    async def stream(prompt):
        text = ""
        async for c in await aclient.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=20, temperature=0, stream=True
        ):
            if c.choices and c.choices[0].delta.content:
                text += c.choices[0].delta.content
        return text

    alone = [await stream(p) for p in prompts]
    together = await asyncio.gather(*[stream(p) for p in prompts])
    assert together == alone


def test_client_disconnect_stops_generation(server):
    from ray import serve

    llm = serve.get_deployment_handle("LLM", app_name="ominix")

    def stats():
        return llm.stats.remote().result()[MODEL]

    before = stats()
    body = {"model": MODEL, "messages": HELLO, "max_tokens": 3500, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            for _ in range(6):
                next(lines)
        # leaving the block closes the connection mid-stream
    for _ in range(100):
        now = stats()
        if now["aborted"] > before["aborted"]:
            break
        time.sleep(0.1)
    assert now["aborted"] == before["aborted"] + 1
    assert now["generated_tokens"] - before["generated_tokens"] < 3500


def test_dashboard_shows_deployments_and_replicas(server, dashboard_url):
    from pathlib import Path

    token_file = Path.home() / ".ray" / "auth_token"
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"} if token_file.exists() else {}
    r = httpx.get(f"{dashboard_url}/api/serve/applications/", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    deployments = r.json()["applications"]["ominix"]["deployments"]
    assert {"Ingress", "Control", "LLM"} <= set(deployments)  # other slots' deployments too
    for d in deployments.values():
        assert d["status"] == "HEALTHY"
        assert any(rep["state"] == "RUNNING" for rep in d["replicas"])
