"""Ollama's keep_alive: numbers, duration strings, -1 for ever, 0 at once; anything else refused."""

import pytest
from pydantic import BaseModel, ValidationError

from deployments.protocol.keep_alive import FOREVER, KeepAlive, describe, parse_keep_alive


@pytest.mark.parametrize(
    "value, seconds",
    [
        (5, 5.0),
        (2.5, 2.5),
        (0, 0.0),
        ("0", 0.0),
        ("300", 300.0),
        (" 30s ", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5m", 90.0),
        ("500ms", 0.5),
        ("+10s", 10.0),
    ],
)
def test_durations_are_seconds(value, seconds):
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", [-1, -1.0, "-1", "-1s"])
def test_minus_one_is_for_ever(value):
    assert parse_keep_alive(value) == FOREVER


@pytest.mark.parametrize("value", [-2, -0.5, "-5m", "-2"])
def test_other_negatives_are_refused(value):
    with pytest.raises(ValueError, match="no negative value but -1"):
        parse_keep_alive(value)


@pytest.mark.parametrize(
    "value", ["soon", "", "5 m", "m", "5d", "inf", "nan", float("nan"), float("inf"), True, [], {}]
)
def test_garbage_is_refused(value):
    with pytest.raises(ValueError, match="keep_alive: expected"):
        parse_keep_alive(value)


class Request(BaseModel):
    keep_alive: KeepAlive | None = None


def test_a_request_field_names_keep_alive():
    assert Request().keep_alive is None
    assert Request(keep_alive="2m").keep_alive == 120.0
    with pytest.raises(ValidationError) as failed:
        Request(keep_alive="-3")
    assert failed.value.errors()[0]["loc"] == ("keep_alive",)


def test_describe():
    assert describe(FOREVER) == "for ever"
    assert describe(3.0) == "3 s"
