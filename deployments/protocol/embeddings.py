"""OpenAI's POST /v1/embeddings: the request (`input` as a string, strings, token ids or lists
of token ids; `encoding_format`; `dimensions`) and the response, with its float or base64
vectors. No Ray, no MLX.
"""

from __future__ import annotations

import base64
from typing import Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, Field, StrictInt, field_validator

from deployments.protocol.keep_alive import KEEP_ALIVE_FIELD, KeepAlive
from deployments.protocol.openai import RequestModel

MAX_INPUTS = 2048  # api.openai.com's limit on the inputs of one request

# Token ids are integers, never booleans (JSON's true is no token id 1).
EmbeddingInput = Union[str, list[str], list[StrictInt], list[list[StrictInt]]]


class EmbeddingRequest(RequestModel):
    input: EmbeddingInput = Field(..., description="Text, texts, token ids, or lists of token ids")
    model: Optional[str] = Field(None, description="Model id; the slot's default when omitted")
    keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Optional[int] = Field(None, ge=1, description="Truncate to this many dimensions (Matryoshka models)")
    user: Optional[str] = None

    @field_validator("input")
    @classmethod
    def _check_input(cls, value: EmbeddingInput) -> EmbeddingInput:
        items = [value] if isinstance(value, str) else value
        if not items:
            raise ValueError("input: must not be empty")
        if len(items) > MAX_INPUTS:
            raise ValueError(f"input: at most {MAX_INPUTS} inputs per request, got {len(items)}")
        if isinstance(items[0], int):  # one token-id list
            items = [items]
        for i, item in enumerate(items):
            if len(item) == 0:
                raise ValueError(f"input[{i}]: must not be empty")
            if isinstance(item, list) and any(t < 0 for t in item):
                raise ValueError(f"input[{i}]: token ids must not be negative")
        return value

    def inputs(self) -> list[str] | list[list[int]]:
        """The inputs as a list: texts, or token-id lists."""
        if isinstance(self.input, str):
            return [self.input]
        if isinstance(self.input[0], int):
            return [list(self.input)]  # type: ignore[arg-type]
        return list(self.input)  # type: ignore[arg-type]


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: Union[list[float], str]


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: EmbeddingUsage


def encode_vector(vector: np.ndarray, encoding_format: str) -> list[float] | str:
    """float: a JSON list; base64: the little-endian float32 bytes, as api.openai.com sends them
    (the openai SDK asks for base64 by default and decodes it with numpy)."""
    vector = np.asarray(vector, dtype="<f4")
    if encoding_format == "base64":
        return base64.b64encode(vector.tobytes()).decode("ascii")
    return vector.tolist()


def embedding_response(
    vectors: list[np.ndarray], model: str, prompt_tokens: int, encoding_format: str
) -> EmbeddingResponse:
    return EmbeddingResponse(
        data=[EmbeddingData(index=i, embedding=encode_vector(v, encoding_format)) for i, v in enumerate(vectors)],
        model=model,
        usage=EmbeddingUsage(prompt_tokens=prompt_tokens, total_tokens=prompt_tokens),
    )
