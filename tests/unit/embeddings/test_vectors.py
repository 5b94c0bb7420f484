"""Matryoshka truncation and which models allow it; the response's float and base64 vectors."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from pydantic import ValidationError

from deployments.embeddings.vectors import truncatable_dims, truncate
from deployments.protocol.embeddings import EmbeddingRequest, encode_vector


def test_truncation_keeps_the_head_and_renormalises():
    v = np.array([[3.0, 4.0, 12.0]], dtype=np.float32) / 13
    out = truncate(v, 2)
    np.testing.assert_allclose(out, [[0.6, 0.8]], atol=1e-6)
    assert truncate(v, None) is v and truncate(v, 3) is v


def test_which_models_may_be_truncated(tmp_path):
    assert truncatable_dims(tmp_path, "bert") is None
    assert truncatable_dims(tmp_path, "qwen3") == []  # any size
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"matryoshka_dims": [768, 256, 64]}))
    assert truncatable_dims(tmp_path, "nomic_bert") == [64, 256, 768]


def test_base64_is_little_endian_float32_as_the_openai_sdk_decodes_it():
    v = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    decoded = np.frombuffer(base64.b64decode(encode_vector(v, "base64")), dtype="<f4")
    np.testing.assert_array_equal(decoded, v)
    assert encode_vector(v, "float") == [0.5, -1.25, 3.0]


@pytest.mark.parametrize(
    "value, inputs",
    [("hi", ["hi"]), (["a", "b"], ["a", "b"]), ([1, 2, 3], [[1, 2, 3]]), ([[1], [2, 3]], [[1], [2, 3]])],
)
def test_every_openai_input_form_becomes_a_list(value, inputs):
    assert EmbeddingRequest(input=value).inputs() == inputs


@pytest.mark.parametrize(
    "value, message",
    [
        ("", "must not be empty"),
        ([], "must not be empty"),
        (["ok", ""], r"input\[1\]: must not be empty"),
        ([[1], []], r"input\[1\]: must not be empty"),
        ([-1, 2], "must not be negative"),
        (["a"] * 2049, "at most 2048"),
    ],
)
def test_bad_inputs_fail_validation_naming_the_input(value, message):
    with pytest.raises(ValidationError, match=message):
        EmbeddingRequest(input=value)
