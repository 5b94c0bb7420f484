"""LLMEngine on the tiny model, without Ray: batching, early exit, seeds, limits."""

import asyncio

import pytest
from pydantic import ValidationError

from deployments.generation.sampling import SamplingParams
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prompts import chat_prompt, completion_prompt
from deployments.protocol.errors import APIError
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest


@pytest.fixture(scope="module")
async def engine(tiny_llm_dir):
    engine = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig())
    yield engine
    engine.shutdown()


async def complete(engine, prompt_text, **kw):
    request = CompletionRequest(prompt=prompt_text, **kw)
    prompt = completion_prompt(engine.tokenizer, request)
    params = SamplingParams.from_request(
        request, engine.resolve_max_tokens(len(prompt.token_ids), request.max_tokens), {}
    )
    text, last = "", None
    async for chunk in engine.generate(prompt, params):
        text += chunk.content
        last = chunk
    return text, last


async def test_batched_greedy_output_equals_sequential(engine):
    prompts = [f"The quick fox number {i} jumps" for i in range(8)]
    alone = [await complete(engine, p, max_tokens=24, temperature=0) for p in prompts]
    together = await asyncio.gather(*[complete(engine, p, max_tokens=24, temperature=0) for p in prompts])
    assert [t for t, _ in together] == [t for t, _ in alone]
    assert all(last.finish_reason == "length" and last.usage.completion_tokens == 24 for _, last in together)


async def test_long_prompts_prefilled_together_equal_each_alone(tiny_llm_dir):
    """Prompts longer than a CPU prefill step (512 tokens), of different lengths: prefilled in
    one batch, they go through the CPU attention kernel (deployments/kernels/llm_attention.py)
    with left-padded masks, and each gets the tokens and log-probabilities it gets alone (the
    random tiny model's greedy text barely depends on its prompt; its log-probabilities do)."""
    from deployments.kernels import llm_attention

    # No prefix cache: the batch must prefill the prompts, not find them where "alone" left them.
    engine = await LLMEngine.start("tiny-uncached", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    assert llm_attention._state["original"] is not None, "the engine did not install the kernel"
    prompts = [" ".join(f"w{(j * 7 + i) % 50}" for j in range(400 + 150 * i)) for i in range(3)]

    async def scored(text):
        prompt = completion_prompt(engine.tokenizer, CompletionRequest(prompt=text))
        params = SamplingParams.from_request(CompletionRequest(prompt=text, max_tokens=6, temperature=0), 6, {})
        entries = [e async for c in engine.generate(prompt, params, logprobs=0) for e in c.logprobs or []]
        return len(prompt.token_ids), [e.token for e in entries], [e.logprob for e in entries]

    try:
        alone = [await scored(p) for p in prompts]
        together = await asyncio.gather(*[scored(p) for p in prompts])
    finally:
        engine.shutdown()
    lengths = [n for n, _, _ in alone]
    assert min(lengths) > 512 and len(set(lengths)) == 3, lengths
    for (_, tokens, logprobs), (_, tokens_alone, logprobs_alone) in zip(together, alone):
        assert tokens == tokens_alone
        assert logprobs == pytest.approx(logprobs_alone, abs=1e-4)


async def test_closing_the_stream_removes_the_sequence(engine):
    before = dict(engine.stats)
    request = CompletionRequest(prompt="hello", max_tokens=3000, temperature=0)
    prompt = completion_prompt(engine.tokenizer, request)
    stream = engine.generate(prompt, SamplingParams.from_request(request, 3000, {}))
    await stream.__anext__()
    await stream.aclose()
    for _ in range(100):
        if engine.stats["aborted"] > before["aborted"]:
            break
        await asyncio.sleep(0.05)
    assert engine.stats["aborted"] == before["aborted"] + 1
    assert engine.stats["running"] == 0
    assert engine.stats["generated_tokens"] - before["generated_tokens"] < 3000


async def test_seed_makes_sampling_reproducible_inside_a_batch(engine):
    kw = dict(max_tokens=16, temperature=1.0)
    a, b, c = await asyncio.gather(
        complete(engine, "hello", seed=7, **kw),
        complete(engine, "hello", seed=7, **kw),
        complete(engine, "hello", seed=8, **kw),
    )
    assert a[0] == b[0]
    assert a[0] != c[0]


async def test_prompt_longer_than_the_context_is_a_400(engine):
    with pytest.raises(APIError) as info:
        engine.resolve_max_tokens(engine.context_length + 1, None)
    assert info.value.status_code == 400 and info.value.code == "context_length_exceeded"
    assert engine.resolve_max_tokens(10, None) == 2048


async def test_chat_prompt_matches_the_template_and_thinking_state(engine):
    tok = engine.tokenizer
    messages = [{"role": "user", "content": "hi"}]
    request = ChatCompletionRequest(messages=messages, chat_template_kwargs={"enable_thinking": False})
    prompt = chat_prompt(tok, request)
    assert prompt.token_ids == tok.apply_chat_template(messages, add_generation_prompt=True, enable_thinking=False)
    assert prompt.initial_state == "normal"


async def test_ignore_eos_generates_up_to_max_tokens(engine):
    # A huge bias makes the end-of-sequence token win every step.
    eos = {str(t): 100.0 for t in engine.tokenizer.eos_token_ids}
    kw = dict(max_tokens=12, temperature=0, logit_bias=eos)
    _, stopped = await complete(engine, "hello", **kw)
    assert stopped.finish_reason == "stop" and stopped.usage.completion_tokens == 1
    _, kept_going = await complete(engine, "hello", ignore_eos=True, **kw)
    assert kept_going.finish_reason == "length" and kept_going.usage.completion_tokens == 12


async def test_min_tokens_holds_the_end_of_sequence_back_that_long(engine):
    """vLLM's min_tokens: the end-of-sequence token the bias makes win is masked for the first
    3 tokens, then wins (the 4th token, counted as vLLM counts it)."""
    eos = {str(t): 100.0 for t in engine.tokenizer.eos_token_ids}
    _, held = await complete(engine, "hello", max_tokens=12, temperature=0, logit_bias=eos, min_tokens=3)
    assert held.finish_reason == "stop" and held.usage.completion_tokens == 4
    with pytest.raises(ValidationError, match="min_tokens"):
        CompletionRequest(prompt="hello", max_tokens=2, min_tokens=3)


async def test_a_slow_consumer_gets_the_same_text_in_fewer_chunks(engine):
    fast, _ = await complete(engine, "The slow reader", max_tokens=40, temperature=0)
    request = CompletionRequest(prompt="The slow reader", max_tokens=40, temperature=0)
    prompt = completion_prompt(engine.tokenizer, request)
    chunks = []
    async for chunk in engine.generate(prompt, SamplingParams.from_request(request, 40, {})):
        chunks.append(chunk)
        while engine.stats["running"]:  # the engine runs ahead to the end (set after its last send)
            await asyncio.sleep(0.02)
    assert len(chunks) == 2  # the first delta, then everything else merged into one
    assert "".join(c.content for c in chunks) == fast
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == 40


def test_is_a_slot_engine_and_healthy(engine):
    from deployments.engine_thread import SlotEngine

    assert isinstance(engine, SlotEngine)
    engine.check_health()
    assert not engine.closed and engine.pending() == 0


async def test_the_stop_string_that_ended_a_choice_is_reported(engine):
    text, last = await complete(engine, "The stop reader", max_tokens=24, temperature=0)
    assert last.stop_sequence is None
    stop = text[len(text) // 2 :][:3]  # a piece of the greedy answer: the same run meets it
    cut, last = await complete(engine, "The stop reader", max_tokens=24, temperature=0, stop=[stop, "\x01never"])
    assert last.finish_reason == "stop" and last.stop_sequence == stop and stop not in cut
