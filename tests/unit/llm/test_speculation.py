"""Speculative decoding inside the batch: prompt-lookup drafts (deployments/llm/drafts.py), the
verdict on them (deployments/llm/speculation.py) and the decode step that runs them
(deployments/llm/decode.py): greedy output unchanged, the target's distribution kept when
sampling, finishes exact inside an accepted draft."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from deployments.llm.batch import Batch, Sequence
from deployments.llm.draft_model import DraftModelDrafter
from deployments.llm.drafts import NgramDrafter, NgramIndex, SpeculativeSettings
from deployments.llm.sampler import RowSampler
from deployments.llm.speculation import verify
from deployments.protocol.generation import collect_choices
from deployments.protocol.openai import ChatCompletionRequest

NGRAM = SpeculativeSettings(num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=3)


def test_the_longest_latest_match_proposes_what_followed_it():
    index = NgramIndex(NGRAM, [1, 2, 3, 9, 9, 5, 2, 3, 7, 8, 6, 1, 2, 3])
    # [1, 2, 3] occurred at the start, followed by 9 9 5 2; [2, 3] occurred later, followed by
    # 7 8 6: the longest suffix wins over a later, shorter one.
    assert index.propose(10) == [9, 9, 5, 2]
    assert index.propose(2) == [9, 9]
    index.extend([4])
    assert index.propose(4) == []  # [3, 4] never occurred before
    index.extend([2, 3])
    # [4, 2, 3] never occurred; [2, 3] did, latest at the end of the first line's copy.
    assert index.propose(4) == [4, 2, 3]


def test_greedy_rows_keep_the_drafts_prefix_that_matches_the_argmax():
    logits = mx.full((2, 4, 6), -10.0)
    best = [[1, 2, 3, 4], [5, 0, 0, 1]]  # per row, the argmax at each position
    for r, row in enumerate(best):
        for j, token in enumerate(row):
            logits[r, j, token] = 5.0
    drafts = mx.array([[1, 2, 0], [5, 5, 5]])  # row 0: two right then a wrong; row 1: one right
    verdict = verify([RowSampler(), RowSampler()], logits, None, drafts, [3, 1])
    assert verdict.accepted.tolist() == [2, 1]
    assert verdict.token.tolist() == [3, 0]  # the target's own token at the first mismatch / after the draft


def test_rejection_sampling_keeps_the_targets_distribution():
    """Many rows of one distribution, drafted the same wrong-ish tokens: the first output token
    is distributed as p0, and given an accepted first draft the second as p1."""
    rows, width = 40000, 6
    p0 = np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    p1 = np.array([0.05, 0.05, 0.5, 0.2, 0.1, 0.1])
    logprobs = mx.array(np.log(np.stack([p0, p1, p1])), dtype=mx.float32)
    logprobs = mx.broadcast_to(logprobs[None], (rows, 3, width))
    drafts = mx.broadcast_to(mx.array([[1, 4]]), (rows, 2))
    samplers = [RowSampler(temperature=1.0)] * rows
    verdict = verify(samplers, logprobs, logprobs, drafts, [2] * rows)
    accepted, token = np.array(verdict.accepted), np.array(verdict.token)
    first = np.where(accepted >= 1, 1, token)
    assert np.abs(np.bincount(first, minlength=width) / rows - p0).max() < 0.01
    second = np.where(accepted >= 2, 4, token)[accepted >= 1]
    assert np.abs(np.bincount(second, minlength=width) / len(second) - p1).max() < 0.015
    assert abs((accepted >= 1).mean() - p0[1]) < 0.01  # a draft x is kept with probability p(x)


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    return load(str(smollm2_dir))


def generate(model, prompts, drafter, max_tokens=24, prefill_batch=4, **kw):
    """`drafter`: a drafter stage, the settings of an n-gram one, or None."""
    if isinstance(drafter, SpeculativeSettings):
        drafter = NgramDrafter(drafter)
    batch = Batch(model, capacity=8, prefill_batch=prefill_batch, drafter=drafter)
    uids = [batch.insert(Sequence([p], max_tokens, RowSampler(), **kw)) for p in prompts]
    events = {u: [] for u in uids}
    for _ in range(500):
        for e in batch.next()[1]:
            events[e.uid].append(e)
        if all(v and v[-1].finish_reason for v in events.values()):
            break
    return [events[u] for u in uids], batch


def copy_task(tokenizer, text):
    messages = [{"role": "user", "content": f"Copy this sentence exactly, word for word:\n{text}"}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)


SENTENCES = [
    "The quick brown fox jumps over the lazy dog. The lazy dog sleeps under the old oak tree.",
    "Alice sent Bob the report on Monday, and Bob sent it back to Alice on Tuesday.",
]


def test_greedy_output_and_logprobs_equal_decoding_without_drafts(smollm2):
    model, tokenizer = smollm2
    prompts = [copy_task(tokenizer, s) for s in SENTENCES] + [tokenizer.encode("Name three colors:")]
    plain, _ = generate(model, prompts, None, max_tokens=24, logprobs=True)
    drafted, batch = generate(model, prompts, NGRAM, max_tokens=24, logprobs=True)
    assert [[e.token for e in row] for row in drafted] == [[e.token for e in row] for row in plain]
    for a, b in zip(plain, drafted):
        assert np.allclose(
            np.stack([np.array(e.logprobs) for e in a]), np.stack([np.array(e.logprobs) for e in b]), atol=1e-3
        )
    counts = batch.decode.counts
    assert counts["accepted"] > 0 and batch.totals.generation_steps < 24, (counts, batch.totals)


def lengths_apart(model, prompts, drafter, lengths):
    """Each prompt its own max_tokens, so that the batch shrinks as rows end."""
    batch = Batch(model, capacity=8, prefill_batch=4, drafter=drafter)
    uids = [batch.insert(Sequence([p], n, RowSampler())) for p, n in zip(prompts, lengths)]
    tokens = {u: [] for u in uids}
    while not all(tokens[u] and len(tokens[u]) == n for u, n in zip(uids, lengths)):
        for e in batch.next()[1]:
            tokens[e.uid].append(e.token)
    return [tokens[u] for u in uids], batch


PAUSE_LENGTHS = [6, 10, 28, 28]


@pytest.fixture(scope="module")
def pause_prompts(smollm2):
    """The drafting-pause batch and its answers without drafts (computed once for both drafters)."""
    model, tokenizer = smollm2
    prompts = [copy_task(tokenizer, s) for s in SENTENCES] * 2
    return prompts, lengths_apart(model, prompts, None, PAUSE_LENGTHS)[0]


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_drafting_pauses_while_the_batch_is_large_and_resumes_as_it_shrinks(smollm2, pause_prompts, method):
    """max_batch 3: four rows decode one step ahead without drafts; as rows end, the two left
    draft again from a drafter rebuilt from their tokens. The answers are the plain ones."""
    model, _ = smollm2
    (prompts, plain), lengths = pause_prompts, PAUSE_LENGTHS
    if method == "ngram":
        drafter = NgramDrafter(SpeculativeSettings(num_speculative_tokens=4, prompt_lookup_max=3, max_batch=3))
    else:
        drafter = DraftModelDrafter(model, 3, max_batch=3)
    sizes = []  # the batch's size at each step that drafted
    propose = drafter.propose
    drafter.propose = lambda rows, newest, limits: sizes.append(len(rows)) or propose(rows, newest, limits)
    drafted, batch = lengths_apart(model, prompts, drafter, lengths)
    assert drafted == plain
    assert sizes and max(sizes) < 3
    # drafts ran only for the two long rows, after the short ones ended
    assert batch.decode.counts["accepted"] > 0 and batch.totals.generation_steps < 28


def test_a_draft_model_drafts_in_the_batch_and_changes_no_answer(smollm2, tiny_llm_dir):
    """The served model as its own draft (every greedy guess right) and a random tiny model
    (nearly every guess wrong), rows joining the batch at different steps: the answers are the
    ones decoding without drafts gives."""
    model, tokenizer = smollm2
    prompts = [copy_task(tokenizer, s) for s in SENTENCES] + [tokenizer.encode(t) for t in ("Hi!", "Count: 1, 2, 3,")]
    plain, _ = generate(model, prompts, None, max_tokens=20, prefill_batch=2)
    itself, batch = generate(model, prompts, DraftModelDrafter(model, 3), max_tokens=20, prefill_batch=2)
    assert [[e.token for e in r] for r in itself] == [[e.token for e in r] for r in plain]
    assert batch.decode.counts["accepted"] >= 0.9 * batch.decode.counts["drafted"] > 0
    random_draft, _ = load(str(tiny_llm_dir))
    wrong, batch = generate(model, prompts, DraftModelDrafter(random_draft, 3), max_tokens=20, prefill_batch=2)
    assert [[e.token for e in r] for r in wrong] == [[e.token for e in r] for r in plain]
    assert batch.decode.counts["drafted"] > 0


def test_a_row_that_ends_inside_an_accepted_draft_ends_exactly_there(smollm2, monkeypatch):
    from deployments.llm.decode import Decode

    model, tokenizer = smollm2
    prompt = copy_task(tokenizer, SENTENCES[0])
    plain = [e.token for e in generate(model, [prompt], None, max_tokens=24)[0][0]]
    for limit in (7, 13):  # max_tokens: a draft never runs past it
        drafted = generate(model, [prompt], NGRAM, max_tokens=limit)[0][0]
        assert [e.token for e in drafted] == plain[:limit] and drafted[-1].finish_reason == "length"
    # A stop token the plain answer reaches: the answer ends on its first occurrence, and the
    # cache handed back holds exactly the tokens reported, also when the stop was a kept
    # drafted token with more kept after it (seen through the spy).
    cut = []
    kept = Decode._kept
    monkeypatch.setattr(Decode, "_kept", lambda self, i, extra: cut.append(extra) or kept(self, i, extra))
    for k in (5, 9, 14, 20):
        stop = plain[k]
        row = generate(model, [prompt], NGRAM, max_tokens=24, stop_tokens=[(stop,)])[0][0]
        first = plain.index(stop)
        assert [e.token for e in row] == plain[: first + 1] and row[-1].finish_reason == "stop"
        assert row[-1].prompt_cache[0].offset == len(row[-1].all_tokens)
        assert stop not in row[-1].all_tokens[len(prompt) : -1]  # nothing past the end stays
    assert any(extra > 0 for extra in cut), cut


async def test_a_mixed_batch_of_chat_schema_and_tool_requests_answers_as_without_drafts(smollm2_dir):
    """The engine on SmolLM2, greedy: a copy task, a JSON-schema answer, a forced tool call and
    n=2 in one batch give the same answers with prompt lookup as without."""
    import asyncio

    from deployments.llm.engine import EngineConfig, LLMEngine
    from tests.unit.llm.test_engine_constraints import BOUNDED, WEATHER, json_schema, stream

    def ask(content, **fields):
        return ChatCompletionRequest(
            messages=[{"role": "user", "content": content}], max_tokens=28, temperature=0, **fields
        )

    requests = [
        ask(f"Copy this sentence exactly, word for word:\n{SENTENCES[1]}", logprobs=True, top_logprobs=2),
        ask("Describe a user as JSON.", response_format=json_schema(BOUNDED)),
        ask("What is the weather in Paris?", tools=[WEATHER], tool_choice="required"),
        ask(f"Say it twice: {SENTENCES[0]}", n=2),
    ]
    answers = {}
    for name, speculative in (("plain", None), ("drafted", NGRAM)):
        engine = await LLMEngine.start(name, smollm2_dir, EngineConfig(speculative=speculative))
        try:
            answers[name] = await asyncio.gather(*(stream(engine, r) for r in requests))
            totals = engine.batch_totals()
        finally:
            engine.shutdown()
    assert totals.accepted_tokens > 0
    for plain, drafted in zip(answers["plain"], answers["drafted"]):
        a, b = collect_choices(plain), collect_choices(drafted)
        assert [answer(c) for c in a[0].values()] == [answer(c) for c in b[0].values()]
        assert a[1].completion_tokens == b[1].completion_tokens
        for x, y in zip(a[0].values(), b[0].values()):
            if x.logprobs:
                assert [e.token for e in x.logprobs] == [e.token for e in y.logprobs]
                assert [e.logprob for e in x.logprobs] == pytest.approx([e.logprob for e in y.logprobs], abs=1e-3)


def answer(choice) -> tuple:
    """What a client reads of a choice (a call's id is random)."""
    calls = [(c.function.name, c.function.arguments) for c in choice.tool_calls]
    return choice.content, choice.reasoning_content, calls, choice.finish_reason


def test_the_acceptance_counters_grow_by_what_is_new_and_survive_an_engine_restart():
    from deployments.llm.metrics import GenerationMetrics

    metrics = GenerationMetrics()
    for sample in [(10, 4), (25, 9), (25, 9), (6, 2)]:  # the last: a new engine, counting from 0
        metrics.speculation({"m": sample})
    summary = metrics.summary("m")
    assert (summary["draft_tokens"], summary["accepted_tokens"]) == (31, 11)


async def test_a_constrained_answer_that_repeats_keeps_drafts_and_its_grammar(tiny_llm_dir):
    """An answer the grammar makes repetitive (an array of enum values) keeps drafted tokens,
    and its grammar moves past each kept one: the answer is the one decoding without drafts
    gives, valid against its schema."""
    import json

    import jsonschema

    from deployments.llm.engine import EngineConfig, LLMEngine
    from tests.gang_requests import answer

    schema = {"type": "array", "items": {"enum": ["alpha beta gamma", "delta epsilon"]}, "minItems": 8, "maxItems": 8}
    body = {
        "messages": [{"role": "user", "content": "A list"}],
        "max_tokens": 120,
        "temperature": 0,
        "chat_template_kwargs": {"enable_thinking": False},
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    }
    answers = {}
    for name, speculative in (("plain", None), ("drafted", NGRAM)):
        engine = await LLMEngine.start(name, tiny_llm_dir, EngineConfig(speculative=speculative))
        try:
            answers[name] = await answer(engine, body)
            totals = engine.batch_totals()
        finally:
            engine.shutdown()
    assert totals.accepted_tokens > 0
    assert answers["drafted"] == answers["plain"]
    jsonschema.validate(json.loads(answers["drafted"][0]["content"]), schema)
