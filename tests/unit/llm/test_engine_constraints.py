"""Constrained decoding inside the engine's continuous batch, without Ray: the tiny model (random
weights: the grammar alone decides the shape) and SmolLM2 at temperature 0 and 1, every answer
read back with json.loads and checked with jsonschema; n choices each held by their own matcher,
and log-probabilities read from the masked logits."""

import asyncio
import json
import math

import jsonschema
import pytest

from deployments.generation.sampling import SamplingParams
from deployments.llm.constraints import Constraint, checked_constraint
from deployments.llm.engine import EngineConfig, LLMEngine
from deployments.llm.prompts import chat_prompt, completion_prompt
from deployments.protocol.errors import APIError
from deployments.protocol.generation import collect_choices
from deployments.protocol.logprobs import MIN_LOGPROB
from deployments.protocol.openai import ChatCompletionRequest, CompletionRequest
from tests.structured import CASES, MAX_TOKENS, SEEDS

# Every string, array and number bounded: even random weights reach the grammar's end.
BOUNDED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 5},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
    },
    "required": ["name", "ok", "tags", "n"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 6}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time"}}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER["function"]["parameters"], "get_time": NO_ARGS}
HELLO = [{"role": "user", "content": "hi"}]


def json_schema(schema, strict=None) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": strict}}


@pytest.fixture(scope="module")
async def tiny(tiny_llm_dir):
    engine = await LLMEngine.start("tiny", tiny_llm_dir, EngineConfig())
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def smollm2(smollm2_dir):
    engine = await LLMEngine.start("smollm2", smollm2_dir, EngineConfig())
    yield engine
    engine.shutdown()


async def stream(engine, request) -> list:
    """What the replica does (deployments/llm/deployment.py): every chunk of every choice."""
    if isinstance(request, ChatCompletionRequest):
        prompt, tools = chat_prompt(engine.tokenizer, request), request.template_tools()
    else:
        prompt, tools = completion_prompt(engine.tokenizer, request), None
    max_tokens = engine.resolve_max_tokens(len(prompt.token_ids), request.token_budget())
    params = SamplingParams.from_request(request, max_tokens, engine.generation_defaults)
    n = request.choice_count()
    guided = await engine.guide(checked_constraint(request), prompt, n)
    chunks = engine.generate(prompt, params, tools, n, request.logprob_count(), guided)
    return [chunk async for chunk in chunks]


async def generate(engine, request) -> dict:
    """One choice's answer, collected as a client sees it."""
    out = {"content": "", "reasoning": "", "calls": [], "chunks": 0}
    for chunk in await stream(engine, request):
        out["chunks"] += 1
        out["content"] += chunk.content
        out["reasoning"] += chunk.reasoning_content
        out["calls"] += chunk.tool_calls
        if chunk.finish_reason:
            out["finish"], out["tokens"] = chunk.finish_reason, chunk.usage.completion_tokens
    return out


def chat(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(**{"messages": HELLO, "max_tokens": 200, **fields})


def no_thinking(**fields) -> ChatCompletionRequest:
    """The tiny Qwen3 with its thinking block closed by the template (random weights could
    think until max_tokens)."""
    return chat(chat_template_kwargs={"enable_thinking": False}, **fields)


def assert_calls_validate(calls) -> None:
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


# ---- the tiny model: random weights, the grammar decides ---------------------------------------


async def test_a_constrained_sequence_leaves_its_batch_neighbours_alone(tiny):
    prompts = [f"The quick fox number {i} jumps" for i in range(4)]
    plain = [CompletionRequest(prompt=p, max_tokens=24, temperature=0) for p in prompts]
    alone = [(await generate(tiny, r))["content"] for r in plain]
    constrained = [
        CompletionRequest(prompt=p, max_tokens=200, temperature=t, seed=7, response_format=json_schema(BOUNDED))
        for p in prompts
        for t in (0, 1)
    ]
    results = await asyncio.gather(*(generate(tiny, r) for r in [*plain, *constrained]))
    assert [r["content"] for r in results[: len(plain)]] == alone
    for r in results[len(plain) :]:
        assert r["finish"] == "stop"  # the grammar's end ends the sequence
        jsonschema.validate(json.loads(r["content"]), BOUNDED)


async def test_json_object_and_json_schema_on_chat(tiny):
    for fmt in ({"type": "json_object"}, json_schema(BOUNDED, strict=True)):
        for temperature in (0, 1):
            r = await generate(tiny, no_thinking(response_format=fmt, temperature=temperature, seed=1))
            if fmt["type"] == "json_schema" or r["finish"] == "stop":  # any object may be cut by max_tokens
                assert r["finish"] == "stop"
                assert isinstance(json.loads(r["content"]), dict)


async def test_the_grammar_ends_the_sequence_even_under_ignore_eos(tiny):
    r = await generate(tiny, chat(response_format=json_schema(BOUNDED), temperature=0, ignore_eos=True))
    assert r["finish"] == "stop" and r["tokens"] < 200
    jsonschema.validate(json.loads(r["content"]), BOUNDED)


async def test_min_tokens_yields_to_a_grammar_that_allows_only_its_end(tiny):
    """A grammar whose only way on is its end ends the answer before min_tokens, rather than
    sampling from nothing: a one-value enum is a few tokens, min_tokens is 100."""
    schema = {"enum": ["yes"]}
    r = await generate(tiny, no_thinking(response_format=json_schema(schema), temperature=1, min_tokens=100))
    assert r["finish"] == "stop" and r["tokens"] < 100 and json.loads(r["content"]) == "yes"


async def test_forced_tool_calls_in_the_models_own_syntax(tiny):
    required, named, single = await asyncio.gather(
        generate(tiny, no_thinking(tools=[WEATHER, CLOCK], tool_choice="required", temperature=1, seed=2)),
        generate(
            tiny,
            no_thinking(tools=[WEATHER, CLOCK], tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        ),
        generate(tiny, no_thinking(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)),
    )
    # Random weights may call and call again until max_tokens: every call that ended parses.
    assert required["finish"] in ("tool_calls", "length")
    assert_calls_validate(required["calls"])
    for r in (named, single):
        assert r["finish"] == "tool_calls" and r["content"] == ""
        assert_calls_validate(r["calls"])
    assert [c.function.name for c in named["calls"]] == ["get_weather"]
    assert len(single["calls"]) == 1


async def test_auto_lets_the_model_answer_text_and_holds_a_call_it_starts(tiny):
    results = await asyncio.gather(
        *(generate(tiny, no_thinking(tools=[WEATHER], temperature=1, seed=s, max_tokens=60)) for s in range(6))
    )
    for r in results:
        if r["calls"]:
            assert_calls_validate(r["calls"])
        assert "<tool_call>" not in r["content"]  # a call it starts always parses


async def test_masks_are_counted(tiny):
    before = dict(tiny.stats)
    r = await generate(tiny, chat(response_format=json_schema(BOUNDED), temperature=0))
    # One mask per generated token (and one for the step the batch computes past the end).
    assert tiny.stats["constrained_tokens"] - before["constrained_tokens"] in (r["tokens"], r["tokens"] + 1)
    assert tiny.stats["mask_seconds"] > before["mask_seconds"]


async def test_n_choices_each_follow_the_schema_with_a_matcher_of_their_own(tiny):
    chat_request = no_thinking(response_format=json_schema(BOUNDED), temperature=1, seed=4, n=2)
    guided = await tiny.guide(checked_constraint(chat_request), chat_prompt(tiny.tokenizer, chat_request), 2)
    assert len({id(mask.matcher) for mask in guided.masks}) == 2  # one grammar, two matchers
    text_request = CompletionRequest(prompt="A fox", max_tokens=200, n=2, response_format=json_schema(BOUNDED))
    for request in (chat_request, text_request):
        before = tiny.stats["constrained_tokens"]
        choices, usage = collect_choices(await stream(tiny, request))
        assert sorted(choices) == [0, 1]
        for choice in choices.values():
            assert choice.finish_reason == "stop"
            jsonschema.validate(json.loads(choice.content), BOUNDED)
        # Each choice's mask ran once per token it generated (and once past its end, at most).
        masks_run = tiny.stats["constrained_tokens"] - before
        assert usage.completion_tokens <= masks_run <= usage.completion_tokens + 2


async def test_logprobs_under_a_constraint_are_those_of_the_masked_logits(tiny):
    request = no_thinking(
        response_format=json_schema(BOUNDED), temperature=1, seed=6, n=2, logprobs=True, top_logprobs=5
    )
    choices, _ = collect_choices(await stream(tiny, request))
    for choice in choices.values():
        jsonschema.validate(json.loads(choice.content), BOUNDED)
        entries = choice.logprobs
        assert entries and "".join(e.token for e in entries) == choice.content
        for e in entries:
            assert math.isfinite(e.logprob) and MIN_LOGPROB < e.logprob <= 0
            # Only tokens the grammar allowed: a masked one (-inf) is no alternative.
            assert all(math.isfinite(t.logprob) and t.logprob > MIN_LOGPROB for t in e.top_logprobs)
        # Where the grammar allows fewer than 5 tokens, they are all listed, and the masked
        # distribution they come from sums to 1 over them.
        few = [e for e in entries if len(e.top_logprobs) < 5]
        assert few
        for e in few:
            assert abs(sum(math.exp(t.logprob) for t in e.top_logprobs) - 1) < 1e-3


async def test_a_grammar_the_replica_cannot_compile_is_a_400_and_it_keeps_serving(tiny):
    request = chat(max_tokens=4)
    prompt = chat_prompt(tiny.tokenizer, request)
    with pytest.raises(APIError) as info:
        await tiny.guide(Constraint(answer={"type": "strin"}), prompt)
    assert info.value.status_code == 400 and "strin" in info.value.message
    assert (await generate(tiny, request))["tokens"] == 4


# ---- SmolLM2: a real model, the table of schemas -------------------------------------------------


def table_request(case, temperature, seed) -> ChatCompletionRequest:
    strict = temperature == 0  # both: the schema as pydantic writes it, and as strict mode closes it
    return ChatCompletionRequest(
        messages=case.messages(),
        response_format=json_schema(case.model.model_json_schema(), strict=strict),
        temperature=temperature,
        top_p=1.0,  # the seeds were measured so; SmolLM2's own default top_p is 0.9
        seed=seed,
        max_tokens=MAX_TOKENS,
    )


async def test_smollm2_answers_follow_every_schema_of_the_table(smollm2):
    runs = [(case, 0, None) for case in CASES] + [(case, 1, seed) for case in CASES for seed in SEEDS]
    results = await asyncio.gather(*(generate(smollm2, table_request(*run)) for run in runs))
    unfinished = [
        (case.name, temperature, r["content"])
        for (case, temperature, _), r in zip(runs, results)
        if r["finish"] != "stop"
    ]
    assert not unfinished
    for (case, _, _), r in zip(runs, results):
        value = json.loads(r["content"])
        jsonschema.validate(value, case.model.model_json_schema())
        case.model.model_validate(value)


async def test_smollm2_json_object_and_a_forced_call_without_a_call_syntax(smollm2):
    """SmolLM2's template has no tool-call syntax: a forced call is the answer's JSON, held back
    and sent as tool_calls once complete."""
    question = [{"role": "user", "content": "What is the weather in Paris? Answer in JSON."}]
    obj, call = await asyncio.gather(
        generate(smollm2, chat(messages=question, response_format={"type": "json_object"}, temperature=0)),
        generate(smollm2, chat(messages=question, tools=[WEATHER, CLOCK], tool_choice="required", temperature=0)),
    )
    assert obj["finish"] == "stop" and isinstance(json.loads(obj["content"]), dict)
    assert call["finish"] == "tool_calls" and call["content"] == "" and call["chunks"] == 1
    assert_calls_validate(call["calls"])
