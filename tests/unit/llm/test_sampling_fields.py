"""logprobs, n and seed in LLMEngine on the tiny model, without Ray: well-formed log-probabilities
from the rows the sampler saw, n choices from one prefill in one batch, a seed that fixes the
answer whatever else runs beside it."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from deployments.generation.sampling import SamplingParams
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prompts import chat_prompt, completion_prompt
from deployments.protocol.generation import collect_choices
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest

PROMPT = "The quick brown fox jumps over the lazy dog and then"


@pytest.fixture(scope="module")
async def engine(tiny_llm_dir):
    # No prefix cache: every prompt token this module prefills is counted by the batch.
    engine = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig(prefix_cache_entries=0))
    yield engine
    engine.shutdown()


async def run(engine, request, chunks=None):
    """The engine's chunks for a request, as the LLM deployment calls it."""
    prompt = (chat_prompt if isinstance(request, ChatCompletionRequest) else completion_prompt)(
        engine.tokenizer, request
    )
    max_tokens = engine.resolve_max_tokens(len(prompt.token_ids), request.token_budget(), request.default_max_tokens)
    params = SamplingParams.from_request(request, max_tokens, {})
    out = [] if chunks is None else chunks
    async for chunk in engine.generate(prompt, params, None, request.choice_count(), request.logprob_count()):
        out.append(chunk)
    return out


def past_the_tokenizer(engine, tiny_llm_dir) -> dict[str, float]:
    """A logit_bias that bans the random tiny model's ids past its tokenizer's vocabulary (a
    padded embedding: their text is "!" as a real token's is, so entries could not be told apart)."""
    vocab = json.loads((tiny_llm_dir / "config.json").read_text())["vocab_size"]
    return {str(t): -100.0 for t in range(len(engine.tokenizer), vocab)}


async def test_logprobs_are_well_formed_and_the_top_is_sorted(engine, tiny_llm_dir):
    request = CompletionRequest(
        prompt=PROMPT,
        max_tokens=12,
        temperature=1.0,
        seed=3,
        logprobs=5,
        ignore_eos=True,
        logit_bias=past_the_tokenizer(engine, tiny_llm_dir),
    )
    choices, usage = collect_choices(await run(engine, request))
    choice = choices[0]
    entries = choice.logprobs
    assert len(entries) == usage.completion_tokens == 12
    for e in entries:
        assert e.logprob <= 0 and len(e.top_logprobs) == 5
        values = [t.logprob for t in e.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert sum(math.exp(v) for v in values) <= 1 + 1e-4
        assert e.logprob <= values[0] + 1e-6  # nothing beats the best
        chosen = [t.logprob for t in e.top_logprobs if t.bytes == e.bytes]
        assert not chosen or abs(chosen[0] - e.logprob) < 1e-5  # among the top: the same value
    # The tokens' bytes are the text, byte for byte.
    assert b"".join(bytes(e.bytes) for e in entries).decode("utf-8", "replace").lstrip() == choice.content.lstrip()


async def test_greedy_picks_the_top_token_and_chat_sends_logprobs_with_the_text(engine):
    request = ChatCompletionRequest(
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=10,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        ignore_eos=True,
        chat_template_kwargs={"enable_thinking": False},
    )
    chunks = await run(engine, request)
    texted = [c for c in chunks if c.content or c.reasoning_content]
    assert texted and all(c.logprobs for c in texted)  # each text delta comes with its tokens
    entries = [e for c in chunks for e in c.logprobs or []]
    assert len(entries) == 10
    for e in entries:
        assert e.bytes == e.top_logprobs[0].bytes and abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5


async def test_logprobs_without_alternatives_and_the_end_of_sequence_token_is_left_out(engine):
    eos = {str(t): 100.0 for t in engine.tokenizer.eos_token_ids}
    request = CompletionRequest(prompt=PROMPT, max_tokens=8, temperature=0, logprobs=0, logit_bias=eos)
    chunks = await run(engine, request)
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage.completion_tokens == 1
    assert [e for c in chunks for e in c.logprobs or []] == []  # the one token was end-of-sequence
    plain = await run(engine, CompletionRequest(prompt=PROMPT, max_tokens=4, temperature=0, ignore_eos=True))
    assert all(c.logprobs is None for c in plain)  # not asked for: none computed


async def test_n_choices_share_one_prefill_and_decode_in_one_batch(engine):
    prompt_tokens = len(engine.tokenizer.encode(PROMPT))
    request = CompletionRequest(prompt=PROMPT, max_tokens=16, temperature=1.0, n=3, ignore_eos=True)
    with engine._batch.stats() as stats:
        chunks = await run(engine, request)
    choices, usage = collect_choices(chunks)
    assert sorted(choices) == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in choices.values())
    assert usage.prompt_tokens == prompt_tokens and usage.completion_tokens == 3 * 16
    assert usage.total_tokens == prompt_tokens + 48
    assert [c for c in chunks if c.usage] == [chunks[-1]]  # one usage, on the request's last chunk
    # Prefilled once: the prompt but its last token (which each choice runs as its first step).
    assert stats.prompt_tokens == prompt_tokens - 1
    # Decoded together: about 16 steps for 48 tokens, not 48.
    assert stats.generation_tokens == 48 and stats.generation_steps <= 16 + 3
    assert len({c.content for c in choices.values()}) > 1  # sampled independently


async def test_n_with_greedy_decoding_gives_identical_choices(engine):
    request = CompletionRequest(prompt=PROMPT, max_tokens=10, temperature=0, n=2, ignore_eos=True)
    choices, _ = collect_choices(await run(engine, request))
    alone, _ = collect_choices(await run(engine, request.model_copy(update={"n": None})))
    assert choices[0].content == choices[1].content == alone[0].content


async def test_a_one_token_prompt_starts_every_choice_at_once(engine):
    token = engine.tokenizer.encode("Hello")[:1]
    request = CompletionRequest(prompt=token, max_tokens=4, temperature=0, n=3, ignore_eos=True)
    choices, usage = collect_choices(await run(engine, request))
    assert len(choices) == 3 and usage.completion_tokens == 12


async def test_the_same_seed_gives_the_same_text_whatever_runs_beside_it(engine):
    def seeded(seed, n=None):
        return CompletionRequest(prompt=PROMPT, max_tokens=16, temperature=1.0, seed=seed, n=n, ignore_eos=True)

    async def text(request):
        choices, _ = collect_choices(await run(engine, request))
        return [c.content for c in choices.values()]

    alone = await text(seeded(11))
    crowd = await asyncio.gather(text(seeded(11)), text(seeded(12)), text(seeded(11, n=3)), text(seeded(-5)))
    assert crowd[0] == alone  # the same seed beside other requests
    assert crowd[1] != alone  # another seed: (almost surely) another text
    assert crowd[2][0] == alone[0] and len(set(crowd[2])) == 3  # choice 0 is the n=1 answer; the others differ
    assert crowd[3] == await text(seeded(-5))  # a negative seed is a seed too


async def test_n_over_the_engine_limit_is_a_400(engine):
    from deployments.protocol.errors import APIError

    with pytest.raises(APIError) as info:
        engine.check_params(SamplingParams(max_tokens=1), n=engine.config.max_n + 1)
    assert info.value.status_code == 400 and info.value.param == "n"


async def test_closing_an_n_stream_removes_every_choice(engine):
    before = dict(engine.stats)
    request = CompletionRequest(prompt=PROMPT, max_tokens=2000, temperature=0, n=3, ignore_eos=True)
    prompt = completion_prompt(engine.tokenizer, request)
    stream = engine.generate(prompt, SamplingParams.from_request(request, 2000, {}), None, 3)
    await stream.__anext__()
    await stream.aclose()
    for _ in range(100):
        if engine.stats["running"] == 0 and engine.stats["aborted"] > before["aborted"]:
            break
        await asyncio.sleep(0.05)
    assert engine.stats["running"] == 0
    assert engine.stats["generated_tokens"] - before["generated_tokens"] < 3 * 2000


async def test_n_choices_with_the_prefix_cache_split_and_hit(tiny_llm_dir):
    """With the prefix cache, a prompt is prefilled in segments (the system prompt first) or
    mostly skipped (a hit): the choices still start from the first one's cache."""
    engine = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig())
    try:
        messages = [
            {"role": "system", "content": "You are a careful assistant. " * 8},
            {"role": "user", "content": "Name three colours."},
        ]
        request = ChatCompletionRequest(
            messages=messages, max_tokens=6, temperature=0, n=3, ignore_eos=True, chat_template_kwargs={}
        )
        assert chat_prompt(engine.tokenizer, request).system_end > 0  # two segments, then the last token
        with engine._batch.stats() as stats:
            first, first_usage = collect_choices(await run(engine, request))
        assert stats.prompt_tokens == first_usage.prompt_tokens - 1  # prefilled once
        again, again_usage = collect_choices(await run(engine, request))
        assert first_usage.prompt_tokens_details.cached_tokens == 0
        assert again_usage.prompt_tokens_details.cached_tokens > 0
        texts = {c.content + c.reasoning_content for c in [*first.values(), *again.values()]}
        assert len(first) == len(again) == 3 and len(texts) == 1  # greedy: one answer, cache or not
    finally:
        engine.shutdown()


async def test_a_completion_without_max_tokens_generates_openais_16(engine):
    chunks = await run(engine, CompletionRequest(prompt=PROMPT, temperature=0, ignore_eos=True))
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == 16


def test_reasoning_effort_reaches_only_a_template_that_reads_it(tiny_tokenizer):
    from types import SimpleNamespace

    from deployments.protocol.errors import APIError

    request = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], reasoning_effort="low")
    assert "reasoning_effort" not in tiny_tokenizer.chat_template
    with pytest.raises(APIError) as info:
        chat_prompt(tiny_tokenizer, request)
    assert info.value.status_code == 400 and info.value.param == "reasoning_effort"

    seen = {}

    def apply_chat_template(messages, **kwargs):
        seen.update(kwargs)
        return "prompt"

    reader = SimpleNamespace(
        has_chat_template=True,
        chat_template="{{ reasoning_effort }}",
        apply_chat_template=apply_chat_template,
        encode=lambda text, add_special_tokens=False: [1, 2],
    )
    chat_prompt(reader, request)
    assert seen["reasoning_effort"] == "low"
