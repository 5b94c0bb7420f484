"""A small table of structured-output cases for the default LLM (SmolLM2-135M-Instruct): the
shapes clients ask for (nested objects, enums, arrays, numbers, optional fields) as pydantic
models, each with a prompt it can answer in a few tokens. The engine tests run it in process,
the e2e tests through `client.chat.completions.parse`.

Temperature 1 is sampled with fixed seeds, each checked to finish well within `MAX_TOKENS` on
this model: a 135M model sampled from its whole distribution can also ramble inside a string
until max_tokens (finish_reason "length"), constrained or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Optional

from pydantic import BaseModel, Field

MAX_TOKENS = 96
SEEDS = (3,)  # temperature 1, top_p 1 (say both: SmolLM2's own defaults are 0.2 and 0.9)


class Person(BaseModel):
    name: str
    age: int


class Household(BaseModel):  # nested objects
    owner: Person
    city: str


class Mood(StrEnum):
    happy = "happy"
    sad = "sad"
    neutral = "neutral"


class Feeling(BaseModel):  # enums
    mood: Mood
    sure: bool


class Palette(BaseModel):  # arrays (bounded: greedy decoding of a small model repeats a list forever)
    colors: list[str] = Field(max_length=3)


class Measurement(BaseModel):  # numbers
    celsius: float
    readings: int


class Book(BaseModel):  # optional fields
    title: str
    year: Optional[int] = None
    subtitle: Optional[str] = None


@dataclass(frozen=True)
class Case:
    name: str
    model: type[BaseModel]
    prompt: str

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.prompt}]


CASES = [
    Case("nested", Household, "Alice, 34, owns a house in Paris. Give the household as JSON."),
    Case("enum", Feeling, "I just won the lottery! How do I feel? Answer in JSON."),
    Case("array", Palette, "List three colors of the rainbow as JSON."),
    Case("numbers", Measurement, "It is 21.5 degrees Celsius after 3 readings. Give the measurement as JSON."),
    Case("optional", Book, "The book 'Dune' was published in 1965. Give the book as JSON."),
]
