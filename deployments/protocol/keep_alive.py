"""Ollama's `keep_alive` request field: how long the model stays loaded after this request.

As Ollama takes it: a number of seconds, or a Go duration string ("5m", "30s", "1h30m",
"500ms"); -1 keeps the model loaded for ever and 0 unloads it as soon as the request is
answered. The last request's value wins for its model from then on (docs/api/models.md, "Idle
models are unloaded"). Two differences from Ollama, both so that a typo cannot pin a model in
memory: a negative value other than -1 is refused (Ollama reads any negative as "for ever"), and
so is anything that is not a number or a duration (a boolean, a list, "soon", "inf"). A bare
numeric string ("300", "-1", "0") is seconds, as a number is.

Parsed to seconds as a float, `FOREVER` (-1.0) for ever: a value that crosses a Ray handle
and JSON alike. Pure: no Ray, no MLX.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

FOREVER = -1.0

_SECONDS_PER_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_PART = r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)"
_DURATION = re.compile(rf"([+-]?)((?:{_PART})+)")
EXPECTED = 'seconds (a number), a duration such as "30s", "5m" or "1h", -1 (keep loaded) or 0 (unload once answered)'


def parse_keep_alive(value: Any) -> float:
    """Seconds the model stays loaded after the request (`FOREVER`: never unloaded); a
    ValueError that says what is expected for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"keep_alive: expected {EXPECTED}; got {value!r}")
    seconds = float(value) if not isinstance(value, str) else _seconds(value.strip())
    if not math.isfinite(seconds):
        raise ValueError(f"keep_alive: expected {EXPECTED}; got {value!r}")
    if seconds == FOREVER:
        return FOREVER
    if seconds < 0:
        raise ValueError(f"keep_alive: no negative value but -1 (keep loaded); got {value!r}")
    return seconds


def _seconds(text: str) -> float:
    if _NUMBER.fullmatch(text):
        return float(text)
    duration = _DURATION.fullmatch(text)
    if duration is None:
        raise ValueError(f"keep_alive: expected {EXPECTED}; got {text!r}")
    sign, body = duration.group(1), duration.group(2)
    total = sum(float(number) * _SECONDS_PER_UNIT[unit] for number, unit in re.findall(_PART, body))
    return -total if sign == "-" else total


# A request model's field: `keep_alive: Optional[KeepAlive] = KEEP_ALIVE_FIELD` (None: not sent).
KeepAlive = Annotated[
    float,
    BeforeValidator(parse_keep_alive),
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string"}]}),
]
KEEP_ALIVE_FIELD = Field(
    None,
    description=(
        "Ollama's: how long the model stays loaded after this request, for its later requests too: "
        'seconds or a duration ("30s", "5m", "1h"); -1 keeps it loaded, 0 unloads it once answered'
    ),
)


def describe(seconds: float) -> str:
    """How a log line or a message names a keep_alive."""
    return "for ever" if seconds == FOREVER else f"{seconds:g} s"
