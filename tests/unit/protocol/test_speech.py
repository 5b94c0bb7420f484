"""The speech request model: OminiX-API's and OpenAI's aliases, bounds, blanks."""

import pytest
from pydantic import ValidationError

from deployments.protocol.speech import SpeechChunk, SpeechRequest


@pytest.mark.parametrize("field", ["instruct", "prompt", "instructions"])
def test_instruct_aliases(field):
    assert SpeechRequest.model_validate({"input": "hi", field: "calm"}).instruct == "calm"


def test_blank_strings_are_absent():
    r = SpeechRequest.model_validate({"input": "hi", "instruct": "  ", "voice": "", "language": " "})
    assert (r.instruct, r.voice, r.language) == (None, None, None)


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"input": "hi", "speed": 0.1},
        {"input": "hi", "speed": 4.5},
        {"input": "hi", "response_format": "ogg"},
        {"input": "hi", "stream_format": "x"},
    ],
)
def test_invalid(body):
    with pytest.raises(ValidationError):
        SpeechRequest.model_validate(body)


def test_chunk_samples_round_trip():
    import numpy as np

    samples = np.array([0.0, 0.5, -1.0], np.float32)
    chunk = SpeechChunk(sample_rate=24000, samples=samples.astype("<f4").tobytes())
    assert chunk.to_array().tolist() == samples.tolist()
    assert SpeechChunk(sample_rate=24000).to_array().size == 0
