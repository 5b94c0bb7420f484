"""A burst of requests on one system prompt prefills it once (deployments/llm/engine.py, _park):
the requests that arrive while the first is prefilling it wait for its cache and start from
it, with the answers they would get alone; if the first leaves before reaching its system
prompt's end, the others still run."""

from __future__ import annotations

import asyncio
import time

import pytest

from deployments.generation.sampling import SamplingParams
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prompts import chat_prompt
from deployments.protocol.openai import ChatCompletionRequest

# ~1500 tokens with the tiny tokenizer: three 512-token prefill steps on the CPU.
SYSTEM = "You are terse. " + " ".join(f"rule{i % 97} says item{i % 13}" for i in range(300))


def messages(user: str) -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


async def scored(engine, user: str):
    """Tokens, log-probabilities and usage of a greedy 6-token answer."""
    request = ChatCompletionRequest(messages=messages(user), max_tokens=6, temperature=0, ignore_eos=True)
    prompt = chat_prompt(engine.tokenizer, request)
    entries, usage = [], None
    async for chunk in engine.generate(prompt, SamplingParams.from_request(request, 6, {}), logprobs=0):
        entries += chunk.logprobs or []
        usage = chunk.usage or usage
    return [e.token for e in entries], [e.logprob for e in entries], usage, prompt


@pytest.fixture(scope="module")
async def uncached(tiny_llm_dir):
    engine = await LLMEngine.start("tiny-plain", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    yield engine
    engine.shutdown()


def slow_steps(monkeypatch, seconds: float) -> None:
    """Every batch step of engines started from here on takes `seconds` longer: the test's
    requests arrive while the first is still prefilling, whatever this machine's speed."""
    make = LLMEngine._new_batch

    def new_batch(self, stream):
        batch = make(self, stream)
        step = batch.next

        def slow():
            time.sleep(seconds)
            return step()

        batch.next = slow
        return batch

    monkeypatch.setattr(LLMEngine, "_new_batch", new_batch)


def same_answer(got, alone) -> None:
    assert got[0] == alone[0]
    assert got[1] == pytest.approx(alone[1], abs=1e-4)


async def test_a_burst_on_one_system_prompt_prefills_it_once(tiny_llm_dir, uncached, monkeypatch):
    slow_steps(monkeypatch, 0.05)
    engine = await LLMEngine.start("tiny-shared", tiny_llm_dir, EngineConfig())
    try:
        users = [f"Question {i}: what is item{i}?" for i in range(4)]
        burst = await asyncio.gather(*(scored(engine, u) for u in users))
    finally:
        engine.shutdown()
    system_end = burst[0][3].system_end
    assert system_end > 1024, "the system prompt must take several prefill steps"
    cached = sorted(r[2].prompt_tokens_details.cached_tokens for r in burst)
    assert cached[0] == 0 and all(c >= system_end for c in cached[1:]), cached
    for user, got in zip(users, burst):
        same_answer(got, await scored(uncached, user))


async def test_the_others_run_when_the_first_leaves_before_its_system_prompt_end(tiny_llm_dir, uncached, monkeypatch):
    slow_steps(monkeypatch, 0.3)
    engine = await LLMEngine.start("tiny-orphans", tiny_llm_dir, EngineConfig())
    try:
        first = asyncio.create_task(scored(engine, "I will hang up."))
        await asyncio.sleep(0.1)  # admitted; its first 512-token step is running
        others = [asyncio.create_task(scored(engine, f"Still here {i}?")) for i in range(2)]
        await asyncio.sleep(0.1)
        first.cancel()
        done = await asyncio.wait_for(asyncio.gather(*others), timeout=120)
    finally:
        engine.shutdown()
    for i, got in enumerate(done):
        same_answer(got, await scored(uncached, f"Still here {i}?"))
    assert engine.stats["aborted"] >= 1
