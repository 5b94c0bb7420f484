"""The embeddings slot on the session graph, through the openai SDK: the real default model
ranks a paraphrase above an unrelated sentence, every input form and encoding works, concurrent
requests share forward passes and get what they would alone, bad input is a 400."""

from __future__ import annotations

import asyncio

import numpy as np
import openai
import pytest

from deployments.embeddings.minilm import MINILM_ID
from deployments.similarity import cosine

QUERY = "How do I bake bread at home?"
PARAPHRASE = "What is a simple recipe for making homemade bread?"
UNRELATED = "The stock market fell sharply after the interest rate decision."


def vectors(response) -> list[np.ndarray]:
    return [np.array(d.embedding, dtype=np.float32) for d in response.data]


def test_a_paraphrase_ranks_above_an_unrelated_sentence(client):
    response = client.embeddings.create(model=MINILM_ID, input=[QUERY, PARAPHRASE, UNRELATED])
    query, paraphrase, unrelated = vectors(response)  # the SDK asked for base64 and decoded it
    assert query.shape == (384,)
    assert cosine(query, paraphrase) > 0.6 > 0.2 > cosine(query, unrelated), (
        cosine(query, paraphrase),
        cosine(query, unrelated),
    )
    assert response.model == MINILM_ID and response.usage.prompt_tokens > 20


# "A man is eating food." as all-MiniLM-L6-v2's tokenizer splits it: [CLS] ... [SEP].
FOOD_TEXT, FOOD_IDS = "A man is eating food.", [101, 1037, 2158, 2003, 5983, 2833, 1012, 102]


def test_float_base64_token_ids_and_text_agree(client, http):
    base64_default = client.embeddings.create(model=MINILM_ID, input=FOOD_TEXT)
    body = http.post("/v1/embeddings", json={"input": FOOD_TEXT, "encoding_format": "float"}).json()
    assert isinstance(body["data"][0]["embedding"], list) and body["model"] == MINILM_ID
    assert body["usage"] == {"prompt_tokens": len(FOOD_IDS), "total_tokens": len(FOOD_IDS)}
    ids = client.embeddings.create(model=MINILM_ID, input=[FOOD_IDS, FOOD_IDS[:3]], encoding_format="float")
    assert [d.index for d in ids.data] == [0, 1] and ids.usage.prompt_tokens == len(FOOD_IDS) + 3
    floats = np.array(body["data"][0]["embedding"], dtype=np.float32)
    np.testing.assert_allclose(vectors(base64_default)[0], floats, atol=1e-6)
    np.testing.assert_allclose(vectors(ids)[0], floats, atol=1e-5)
    assert cosine(vectors(ids)[1], floats) < 0.99  # a different input, a different vector


async def test_concurrent_requests_share_forward_passes_and_match_one_at_a_time(aclient):
    from ray import serve

    texts = [QUERY, PARAPHRASE, UNRELATED, "A dog runs in the park.", "Ein Hund rennt im Park."]

    async def embed(i: int) -> np.ndarray:
        response = await aclient.embeddings.create(model=MINILM_ID, input=texts[i % len(texts)])
        return vectors(response)[0]

    reference = [await embed(i) for i in range(len(texts))]  # one at a time: batches of one
    slot = serve.get_deployment_handle("Embeddings", app_name="ominix")
    before = await slot.stats.remote()
    results = await asyncio.gather(*(embed(i) for i in range(16)))  # under the ingress's cap of 24
    after = await slot.stats.remote()
    for i, vector in enumerate(results):
        np.testing.assert_allclose(vector, reference[i % len(texts)], atol=1e-5)
    new_batches = {int(k): v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()}
    assert max(size for size, n in new_batches.items() if n > 0) > 1, new_batches
    engine = after["engines"][MINILM_ID]
    passes = engine["forward_passes"] - before["engines"][MINILM_ID]["forward_passes"]
    assert passes < 16, (passes, new_batches)  # fewer passes than requests: batched


@pytest.mark.parametrize(
    "kwargs, param, words",
    [
        ({"input": QUERY, "dimensions": 128}, "dimensions", "does not support `dimensions`"),
        ({"input": "word " * 600}, "input", "at most 512"),
        ({"input": [[101, 999999]]}, "input", "vocabulary"),
        ({"input": ""}, "input", "must not be empty"),
    ],
)
def test_bad_input_is_a_400_naming_the_problem(client, kwargs, param, words):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MINILM_ID, encoding_format="float", **kwargs)
    assert info.value.body["param"].split(".")[0] == param and words in info.value.message
    assert client.embeddings.create(model=MINILM_ID, input="still serving").data  # the replica lives on
