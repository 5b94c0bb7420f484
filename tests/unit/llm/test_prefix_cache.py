"""The prompt (prefix) cache: where prompts are split, and on the tiny model that a shared system
prompt and a chat's history are not prefilled again, with the same greedy output as without."""

from __future__ import annotations

import asyncio

import pytest

from deployments.generation.sampling import SamplingParams
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prefix_cache import HISTORY, SYSTEM, plan_segments
from deployments.llm.prompts import chat_prompt
from deployments.protocol.openai import ChatCompletionRequest

SYSTEM_PROMPT = "You are a careful assistant. " * 12


@pytest.mark.parametrize(
    "tokens, cached, system_end, segments, keep",
    [
        (list(range(10)), 0, 0, [list(range(10))], [HISTORY]),
        (list(range(10)), 0, 4, [[0, 1, 2, 3], list(range(4, 10))], [SYSTEM, HISTORY]),
        (list(range(10)), 6, 4, [list(range(6, 10))], [HISTORY]),  # the system part is cached
        (list(range(10)), 9, 4, [[9]], []),  # only the last token runs
        (list(range(10)), 0, 9, [list(range(10))], [HISTORY]),  # no room after the system part
    ],
)
def test_prompts_are_split_where_a_cache_is_worth_keeping(tokens, cached, system_end, segments, keep):
    assert plan_segments(tokens, cached, system_end) == (segments, keep)


@pytest.fixture(scope="module")
async def engines(tiny_llm_dir):
    cached = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig())
    plain = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    yield cached, plain
    cached.shutdown()
    plain.shutdown()


async def chat(engine, messages, max_tokens=12):
    request = ChatCompletionRequest(messages=messages, max_tokens=max_tokens, temperature=0, ignore_eos=True)
    prompt = chat_prompt(engine.tokenizer, request)
    text, last = "", None
    async for chunk in engine.generate(prompt, SamplingParams.from_request(request, max_tokens, {})):
        text += chunk.content + chunk.reasoning_content
        last = chunk
    return text, last.usage, prompt


def _system(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


async def test_a_shared_system_prompt_is_prefilled_once(engines):
    cached, plain = engines
    _, first, prompt = await chat(cached, _system("What is a fox?"))
    assert prompt.system_end > 60 and first.prompt_tokens_details.cached_tokens == 0
    text, second, prompt = await chat(cached, _system("Tell me about dogs and cats."))
    assert prompt.system_end <= second.prompt_tokens_details.cached_tokens < second.prompt_tokens
    assert text == (await chat(plain, _system("Tell me about dogs and cats.")))[0]
    assert cached.prefix_cache.stats()["hits"] >= 1


async def test_the_next_turn_of_a_chat_reuses_the_history_and_the_answer(engines):
    cached, plain = engines
    turn = [{"role": "user", "content": "Once upon a time there was a fox who lived in a wood."}]
    answer, usage, prompt = await chat(cached, turn, max_tokens=16)
    turn += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    text, usage, _ = await chat(cached, turn)
    # Everything the first turn's prompt held is reused (the answer too, as far as the template
    # renders it the same way as it was generated).
    assert usage.prompt_tokens_details.cached_tokens >= len(prompt.token_ids) - 1
    assert text == (await chat(plain, turn))[0]


async def test_the_same_prompt_again_prefills_only_its_last_token(engines):
    cached, plain = engines
    messages = [{"role": "user", "content": "Repeat after me: the quick brown fox."}]
    first, _, prompt = await chat(cached, messages)
    again, usage, _ = await chat(cached, messages)
    assert usage.prompt_tokens_details.cached_tokens == len(prompt.token_ids) - 1
    assert first == again == (await chat(plain, messages))[0]


async def test_cache_hits_inside_a_batch_give_the_same_text_as_alone(engines):
    cached, plain = engines
    users = [f"Question {i}: what do foxes eat?" for i in range(6)]
    together = await asyncio.gather(*[chat(cached, _system(u)) for u in users])
    alone = [await chat(plain, _system(u)) for u in users]
    assert [t for t, _, _ in together] == [t for t, _, _ in alone]
    assert all(u.prompt_tokens_details.cached_tokens > 0 for _, u, _ in together)


async def test_without_the_cache_nothing_is_reused(engines):
    _, plain = engines
    await chat(plain, _system("one"))
    _, usage, _ = await chat(plain, _system("two"))
    assert usage.prompt_tokens_details.cached_tokens == 0 and plain.prefix_cache is None


async def test_a_failing_cache_turns_itself_off_and_the_generation_goes_on(tiny_llm_dir):
    engine = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig())
    try:

        def broken(*args, **kwargs):
            raise MemoryError("no room for the cache")

        engine.prefix_cache.keep = broken
        text, usage, _ = await chat(engine, _system("Still answering?"))
        assert usage.completion_tokens == 12 and engine.prefix_cache is None
        again, usage, _ = await chat(engine, _system("Still answering?"))
        assert again == text and usage.prompt_tokens_details.cached_tokens == 0
    finally:
        engine.shutdown()
