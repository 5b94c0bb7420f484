"""The embeddings engine with the real all-MiniLM-L6-v2: one forward pass per batch equals one
input at a time, the vectors mean something, token ids and bad input are checked."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.embeddings.engine import EmbeddingsEngine, EngineConfig
from deployments.embeddings.minilm import MINILM_ID, ensure_minilm
from deployments.protocol.errors import APIError
from deployments.similarity import cosine

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A man is riding a white horse on an enclosed ground.",
]


@pytest.fixture(scope="module")
async def engine(cache_dir):
    engine = await EmbeddingsEngine.start(MINILM_ID, ensure_minilm(cache_dir), EngineConfig(max_inputs_per_pass=4))
    yield engine
    engine.shutdown()


async def test_a_batch_is_one_forward_pass_and_equals_one_input_at_a_time(engine):
    tokens = engine.tokenize(SENTENCES[:4])
    before = dict(engine.stats)
    batched = await engine.embed(tokens)
    assert engine.stats["forward_passes"] - before["forward_passes"] == 1
    singles = np.stack([(await engine.embed([ids]))[0] for ids in tokens])
    np.testing.assert_allclose(batched, singles, atol=1e-5)


async def test_a_batch_past_the_pass_limit_is_split_and_keeps_its_order(engine):
    tokens = engine.tokenize(SENTENCES)
    before = engine.stats["forward_passes"]
    rows = await engine.embed(tokens)
    assert engine.stats["forward_passes"] - before == 2  # 5 inputs, 4 per pass
    np.testing.assert_allclose(rows[4], (await engine.embed([tokens[4]]))[0], atol=1e-5)


async def test_the_real_model_scores_the_pairs_sentence_transformers_documents(engine):
    rows = await engine.embed(engine.tokenize(SENTENCES))
    assert engine.dimensions == 384
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    assert cosine(rows[0], rows[1]) == pytest.approx(0.755, abs=0.01)  # food / bread
    assert cosine(rows[3], rows[4]) == pytest.approx(0.737, abs=0.01)  # horse / white horse
    assert cosine(rows[0], rows[1]) > cosine(rows[0], rows[2]) + 0.5


async def test_token_ids_of_a_text_embed_like_the_text(engine):
    (ids,) = engine.tokenize(["A man is eating food."])
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]: the model's special tokens
    np.testing.assert_allclose((await engine.embed([ids]))[0], (await engine.embed(engine.tokenize([SENTENCES[0]])))[0])


def test_bad_inputs_and_dimensions_are_400s_naming_the_problem(engine):
    with pytest.raises(APIError, match="at most 512") as e:
        engine.check_tokens([[101] * 513])
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(APIError, match="token id 30522"):
        engine.check_tokens([[101, 30522, 102]])
    with pytest.raises(APIError, match="does not support `dimensions`") as e:
        engine.check_dimensions(128)
    assert e.value.param == "dimensions"
    engine.check_dimensions(None)
