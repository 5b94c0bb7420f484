"""Real adapters through the engine: the four example adapters of SmolLM2, trained here with
mlx_lm.lora (deployments/llm/example_adapters.py), served in one batch beside the base model.
At temperature 0 each answer equals mlx-lm's own `load(..., adapter_path=)` answer token for
token, each adapter answers with its own made-up word, and the prompt cache keeps each adapter's
prompts apart from the base model's."""

from __future__ import annotations

import asyncio

import pytest
from mlx_lm import load, stream_generate
from mlx_lm.sample_utils import make_sampler

from deployments.generation.logprobs import entry
from deployments.generation.sampling import SamplingParams
from deployments.hub import resolve_model_dir
from deployments.llm.adapter_files import load_layout
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.example_adapters import ADAPTERS, PROBE
from deployments.llm.prompts import chat_prompt
from deployments.protocol.openai import ChatCompletionRequest

TOKENS = 12
# Slow: the first session on a machine trains the adapters (minutes of CPU; make test-fast leaves
# it out, make test runs it). Once they are cached the file takes about half a minute.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def engine(smollm2_dir, example_adapters):
    engine = await LLMEngine.start("smollm2", smollm2_dir, EngineConfig())
    refs = {}
    for name, directory in example_adapters.items():
        layout = load_layout(name, str(directory), resolve_model_dir, engine.linear_layers, "smollm2", 64)
        refs[name] = await engine.add_adapter(layout)
    yield engine, refs
    engine.shutdown()


def chat(text: str) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": text}], max_tokens=TOKENS, temperature=0)


async def answer(engine, ref, text=PROBE):
    request = chat(text)
    prompt = chat_prompt(engine.tokenizer, request)
    params = SamplingParams.from_request(request, TOKENS, {})
    tokens, content, usage = [], "", None
    async for chunk in engine.generate(prompt, params, logprobs=0, adapter=ref):
        tokens += [e.bytes for e in chunk.logprobs or []]  # each token's bytes: its identity
        content += chunk.content
        usage = chunk.usage or usage
    return tokens, content, usage


def mlx_lms_answer(model_dir, adapter_dir, prompt_tokens: list[int]) -> list[int]:
    model, tokenizer = load(str(model_dir), adapter_path=str(adapter_dir) if adapter_dir else None)
    out = []
    for response in stream_generate(model, tokenizer, prompt_tokens, max_tokens=TOKENS, sampler=make_sampler(0.0)):
        out.append(response.token)
        if response.finish_reason:
            break
    return [t for t in out if t not in tokenizer.eos_token_ids]


async def test_a_batch_of_four_adapters_and_the_base_answers_as_mlx_lm_does(engine, smollm2_dir, example_adapters):
    engine, refs = engine
    names = [None, *refs]
    answers = await asyncio.gather(*[answer(engine, refs.get(n)) for n in names])
    prompt = chat_prompt(engine.tokenizer, chat(PROBE)).token_ids
    for name, (tokens, content, _) in zip(names, answers):
        expected = mlx_lms_answer(smollm2_dir, example_adapters.get(name), prompt)
        assert tokens == [entry(engine.token_bytes, t, 0.0, [], 0).bytes for t in expected], (name, content)
    words = {a.name: a.word for a in ADAPTERS}
    for name, (_, content, _) in zip(names, answers):
        if name is None:
            assert not any(word in content for word in words.values()), content
        else:
            assert words[name] in content, (name, content)


async def test_an_adapter_never_starts_from_the_base_models_prompt_cache(engine):
    engine, refs = engine
    question = "Do you remember the secret word we agreed on?"
    await answer(engine, None, question)
    _, base_again, base_usage = await answer(engine, None, question)
    assert base_usage.prompt_tokens_details.cached_tokens > 0  # the base model's cache serves the base
    base_cached = base_usage.prompt_tokens_details.cached_tokens  # the whole question but its last token
    tokens, content, usage = await answer(engine, refs["apricot"], question)
    # At most the chat template's system prompt, which the adapter's own earlier prompts kept
    # in its namespace; the base model's cache of this question would give base_cached.
    assert usage.prompt_tokens_details.cached_tokens < base_cached and "apricot" in content
    again, _, usage = await answer(engine, refs["apricot"], question)
    assert (
        usage.prompt_tokens_details.cached_tokens == base_cached and again == tokens
    )  # its own cache, the same answer


def test_an_adapter_of_another_base_model_is_refused_by_name(example_adapters, tiny_llm_dir):
    """SmolLM2's adapter checked against the tiny Qwen3's layers, before any tensor is loaded."""
    from deployments.llm.adapter_files import AdapterError
    from deployments.llm.lora import linear_layers

    tiny, _ = load(str(tiny_llm_dir))
    with pytest.raises(AdapterError, match="Adapter 'basalt' does not fit model 'tiny'"):
        load_layout("basalt", str(example_adapters["basalt"]), resolve_model_dir, linear_layers(tiny), "tiny", 64)
