"""The engine's batch core (deployments/llm/batch.py) on the tiny model, against mlx-lm's own
BatchGenerator and single-sequence generation: same tokens, caches that hold what they say,
and the grammar, sampler and mask stages checked numerically."""

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator

from deployments.llm.batch import Batch, Sequence
from deployments.llm.masks import MaskStage
from deployments.llm.sampler import RowSampler, pick


@pytest.fixture(scope="module")
def model(tiny_llm_dir):
    return load(str(tiny_llm_dir))


def prompts(tokenizer, n):
    return [tokenizer.encode(f"Sequence {i} says: " + "word " * (3 * i)) for i in range(n)]


def run(batch: Batch) -> dict[int, list]:
    out: dict[int, list] = {}
    done: set[int] = set()
    for _ in range(1000):
        _, events = batch.next()
        for e in events:
            out.setdefault(e.uid, []).append(e)
            if e.finish_reason:
                done.add(e.uid)
        if not batch.waiting and not len(batch.prefill) and not len(batch.decode):
            break
    return out


def test_greedy_tokens_equal_mlx_lms_batch_generator(model):
    net, tokenizer = model
    ps = prompts(tokenizer, 6)
    theirs = BatchGenerator(net, completion_batch_size=4, prefill_batch_size=2, prefill_step_size=7)
    uids = theirs.insert(ps, max_tokens=[12] * len(ps))
    expected: dict[int, list[int]] = {u: [] for u in uids}
    while any(len(v) < 12 for v in expected.values()):
        for r in theirs.next()[1]:
            expected[r.uid].append(r.token)
    ours = Batch(net, capacity=4, prefill_batch=2, prefill_step=7)
    mine = [ours.insert(Sequence([p], 12, RowSampler())) for p in ps]
    got = run(ours)
    assert [[e.token for e in got[u]] for u in mine] == [expected[u] for u in uids]
    assert all(got[u][-1].finish_reason == "length" for u in mine)


def test_a_finished_rows_cache_holds_exactly_its_tokens(model):
    """The cache a finished row hands back (for the prompt cache) continues its tokens as a
    fresh prefill of them would."""
    net, tokenizer = model
    prompt = tokenizer.encode("The cache must hold what it says it holds")
    batch = Batch(net, capacity=4, prefill_batch=2)
    uid = batch.insert(Sequence([prompt], 5, RowSampler()))
    last = run(batch)[uid][-1]
    assert last.all_tokens[: len(prompt)] == prompt and len(last.all_tokens) == len(prompt) + 5
    assert last.prompt_cache[0].offset == len(last.all_tokens)
    # The next token after the kept cache equals a fresh prefill's.
    probe = mx.array([[7]])
    kept = net(probe, cache=last.prompt_cache)
    from mlx_lm.models.cache import make_prompt_cache

    fresh_cache = make_prompt_cache(net)
    net(mx.array([last.all_tokens]), cache=fresh_cache)
    fresh = net(probe, cache=fresh_cache)
    assert np.allclose(np.array(kept), np.array(fresh), atol=1e-4)


def test_segments_report_their_ends_and_removal_leaves_the_others(model):
    net, tokenizer = model
    system, user = tokenizer.encode("A long system prompt " * 4), tokenizer.encode("and a question")
    batch = Batch(net, capacity=4, prefill_batch=4, prefill_step=8)
    a = batch.insert(Sequence([system, user], 6, RowSampler()))
    b = batch.insert(Sequence([system + user], 6, RowSampler()))
    ends, tokens = [], {}
    for _ in range(200):
        prompt_events, events = batch.next()
        ends += [(e.uid, e.end_of_prompt) for e in prompt_events if e.end_of_segment]
        for e in events:
            tokens.setdefault(e.uid, []).append(e.token)
        if len(tokens.get(a, [])) == 2 and b in tokens:
            batch.remove([b])
        if not len(batch.decode) and not len(batch.prefill) and not batch.waiting:
            break
    assert (a, False) in ends and ends.count((a, False)) == 2  # the system prompt's end, then all but the last token
    assert len(tokens[a]) == 6 and len(tokens[b]) < 6


def test_seeded_rows_sample_what_mlx_lms_sampler_would_and_ignore_their_neighbours():
    logits = mx.random.normal((3, 50), key=mx.random.key(1))
    logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    seeded = RowSampler(temperature=0.8, top_p=0.9, seed=42)
    alone = pick([RowSampler(temperature=0.8, top_p=0.9, seed=42)], logits[1:2]).tolist()
    mixed = pick([RowSampler(), seeded, RowSampler(temperature=1.0)], logits, logprobs).tolist()
    assert mixed[1] == alone[0]
    assert mixed[0] == int(mx.argmax(logits[0]))


def test_the_mask_stage_forbids_exactly_the_cleared_bits():
    width, rows = 70, 3
    allowed = np.zeros((2, width), dtype=bool)
    allowed[0, [0, 5, 31, 32, 69]] = True
    allowed[1, [1, 64]] = True
    words = (width + 31) // 32
    bits = np.zeros((2, words), dtype=np.uint32)
    for r in range(2):
        for t in np.flatnonzero(allowed[r]):
            bits[r, t // 32] |= np.uint32(1 << (t % 32))
    logits = mx.zeros((rows, width + 6))  # logits wider than the grammar's vocabulary
    out = np.array(MaskStage().apply(logits, [0, 2], bits.view(np.int32), width))
    assert np.array_equal(np.isfinite(out[0]), np.pad(allowed[0], (0, 6)))
    assert np.isfinite(out[1]).all()  # an unconstrained row is left alone
    assert np.array_equal(np.isfinite(out[2]), np.pad(allowed[1], (0, 6)))


def test_the_mask_stage_keeps_each_allowed_logit_as_it_was_and_sets_the_rest_to_minus_inf():
    """Against a column-by-column reading of the bits, over random batches, draft positions,
    grammar widths under the logits' and bits past them: the values `where` would give."""
    rng = np.random.default_rng(3)
    stage = MaskStage()
    for _ in range(100):
        batch, positions, columns = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 200))
        width = int(rng.integers(1, columns + 1))
        rows = sorted(rng.choice(batch, size=int(rng.integers(1, batch + 1)), replace=False).tolist())
        words = (width + 31) // 32 + int(rng.integers(0, 2))
        bits = rng.integers(-(2**31), 2**31, size=(len(rows) * positions, words), dtype=np.int64).astype(np.int32)
        logits = mx.random.normal((batch, positions, columns)) * 4
        out = np.array(stage.apply(logits if positions > 1 else logits[:, 0], rows, bits, width))
        expected = np.array(logits)
        for k, row in enumerate(rows):
            for j in range(positions):
                word = bits[k * positions + j]
                allowed = [c < width and (int(word[c // 32]) >> (c % 32)) & 1 for c in range(columns)]
                expected[row, j, ~np.array(allowed, dtype=bool)] = -np.inf
        assert np.array_equal(out.reshape(expected.shape), expected)
