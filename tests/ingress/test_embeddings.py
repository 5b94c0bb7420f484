"""POST /v1/embeddings in process: the OpenAI input forms reach the slot as one request, bad
input is a 400 naming the field before any slot work, unknown models are a 404."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.assertions import assert_openai_error


async def test_a_list_of_texts_reaches_the_slot_once_and_comes_back_in_order(http, slots):
    r = await http.post("/v1/embeddings", json={"input": ["a b", "c"], "model": "ominix-all-minilm-l6-v2"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    assert body["data"][1]["embedding"] == [0.0, 1.0, 0.0, 0.0]
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    ((method, (request,), model),) = slots["embeddings"].calls
    assert (method, model, request.inputs()) == ("embed", "ominix-all-minilm-l6-v2", ["a b", "c"])


async def test_base64_vectors_decode_to_the_float_ones(http):
    r = await http.post("/v1/embeddings", json={"input": [[5, 6]], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    vector = np.frombuffer(base64.b64decode(r.json()["data"][0]["embedding"]), dtype="<f4")
    assert vector.tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": ["ok", 3]}, "input"),
        ({"input": [[1, 2], "text"]}, "input"),
        ({"input": [-4]}, "input"),
        ({"input": {"text": "x"}}, "input"),
        ({}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "dimensions": "big"}, "dimensions"),
    ],
)
async def test_bad_input_is_a_400_naming_the_field_and_no_slot_sees_it(http, slots, body, param):
    r = await http.post("/v1/embeddings", json=body)
    error = assert_openai_error(r, 400)
    assert error["param"].split(".")[0] == param, error  # a union's member may follow: input.list[str].1
    assert not slots["embeddings"].calls


async def test_an_unknown_model_is_a_404_before_the_slot(http, slots):
    r = await http.post("/v1/embeddings", json={"input": "x", "model": "no-such-embedding-model"})
    assert_openai_error(r, 404, param="model", code="model_not_found")
    assert not slots["embeddings"].calls
