"""The VLM engine with the built-in tiny Qwen2-VL: images reach the vision tower (their tokens
count in the prompt), generation streams and stops where asked, a cancelled stream stops."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from deployments.generation.sampling import SamplingParams
from deployments.vlm.engine import VLMEngine
from deployments.vlm.tiny_model import TINY_VLM_ID, ensure_tiny_vlm


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
async def engine(cache_dir):
    engine = await VLMEngine.start(TINY_VLM_ID, ensure_tiny_vlm(cache_dir))
    yield engine
    engine.shutdown()


def user(*parts) -> list[dict]:
    return [{"role": "user", "content": [*parts, {"type": "text", "text": "What is this?"}]}]


async def run(engine, messages, images, **sampling):
    chunks = [
        c
        async for c in engine.generate(
            messages, images, SamplingParams(**{"max_tokens": 6, "temperature": 0.0, **sampling})
        )
    ]
    return "".join(c.content for c in chunks), chunks[-1]


async def test_each_image_adds_its_vision_tokens_to_the_prompt(engine):
    _, text_only = await run(engine, user(), [])
    _, one = await run(engine, user({"type": "image"}), [png(112, 112)])
    _, two = await run(engine, user({"type": "image"}, {"type": "image"}), [png(112, 112), png(56, 56)])
    # 112x112 -> 4x4 merged patches: 16 image tokens + vision start/end; 56x56 -> 4 + 2.
    assert one.usage.prompt_tokens - text_only.usage.prompt_tokens == 16 + 2
    assert two.usage.prompt_tokens - one.usage.prompt_tokens == 4 + 2
    assert one.finish_reason == "length" and one.usage.completion_tokens == 6
    assert one.usage.total_tokens == one.usage.prompt_tokens + 6


async def test_greedy_output_is_deterministic_and_a_stop_string_ends_it(engine):
    messages, images = user({"type": "image"}), [png(64, 48)]
    first, _ = await run(engine, messages, images, temperature=0.0)
    again, _ = await run(engine, messages, images, temperature=0.0)
    assert first and first == again
    stop = first[len(first) // 2 :][:3]
    stopped, last = await run(engine, messages, images, temperature=0.0, stop=[stop])
    assert last.finish_reason == "stop" and stop not in stopped and first.startswith(stopped)


async def test_leaving_the_stream_aborts_the_generation(engine):
    before = engine.stats["aborted"]
    # Long enough that the abort lands mid-generation on a loaded machine too (200 tokens of the
    # tiny model once finished before it did, under make test-fast's parallel load).
    stream = engine.generate(user({"type": "image"}), [png(56, 56)], SamplingParams(max_tokens=2000))
    async for _ in stream:
        break
    await stream.aclose()
    _, last = await run(engine, user(), [])  # the engine serves the next request
    assert last.usage.completion_tokens == 6 and engine.stats["aborted"] == before + 1


async def test_each_token_comes_with_its_log_probability_and_the_likeliest_others(engine):
    messages, images = user({"type": "image"}), [png(64, 48)]
    params = SamplingParams(max_tokens=6, temperature=0.0)
    chunks = [c async for c in engine.generate(messages, images, params, logprobs=3)]
    entries = [e for c in chunks for e in (c.logprobs or [])]
    assert len(entries) == chunks[-1].usage.completion_tokens == 6
    for e in entries:  # greedy: the chosen token is the likeliest, with its own value
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        assert e.top_logprobs[0].logprob == e.logprob <= 0
        assert [t.logprob for t in e.top_logprobs] == sorted((t.logprob for t in e.top_logprobs), reverse=True)
    plain = [c async for c in engine.generate(messages, images, params)]
    assert all(c.logprobs is None for c in plain)
    assert "".join(c.content for c in plain) == "".join(c.content for c in chunks)


async def test_the_log_probabilities_are_those_the_sampler_saw(engine):
    """After logit_bias, as the LLM reports them: a token biased far above the rest is chosen with
    a log-probability of ~0."""
    messages, images = user({"type": "image"}), [png(64, 48)]
    token = engine._processor.tokenizer.encode(" blue", add_special_tokens=False)[0]
    params = SamplingParams(max_tokens=3, temperature=0.0, logit_bias={token: 100.0})
    chunks = [c async for c in engine.generate(messages, images, params, logprobs=0)]
    entries = [e for c in chunks for e in c.logprobs or []]
    assert [e.token for e in entries] == [" blue"] * 3
    assert all(e.logprob > -1e-3 and e.top_logprobs == [] for e in entries)


async def test_n_choices_come_one_after_the_other_with_the_usage_of_all(engine):
    messages, images = user({"type": "image"}), [png(64, 48)]
    params = SamplingParams(max_tokens=4, temperature=1.0, seed=7)
    chunks = [c async for c in engine.generate(messages, images, params, n=3)]
    finals = [c for c in chunks if c.finish_reason]
    assert [c.index for c in finals] == [0, 1, 2] and chunks[-1].usage is not None
    assert [c.usage is not None for c in finals] == [False, False, True]  # once, on the last
    texts = ["".join(c.content for c in chunks if c.index == i) for i in range(3)]
    single = [c async for c in engine.generate(messages, images, params)]
    assert texts[0] == "".join(c.content for c in single)  # the same seed, the same first choice
    assert len(set(texts)) > 1  # sampled: the choices differ
    usage = chunks[-1].usage
    assert usage.prompt_tokens == single[-1].usage.prompt_tokens and usage.completion_tokens == 12
