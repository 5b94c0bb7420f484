"""What the Schemathesis runs of both layers share (tests/ingress/test_schema_fuzz.py in process,
tests/e2e/test_schema_fuzz.py on the live graph): the checks a generated request must pass."""

from __future__ import annotations

from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection


def checks_for(case) -> list:
    """`not_a_server_error` (no 5xx, whatever is sent) and `negative_data_rejection` (a request
    the schema calls invalid is refused with a 4xx, never served).

    A multipart form carries text parts and files only: a wrong JSON type cannot be sent in one
    (1 and null arrive as the strings "1" and "null", an empty list as no part at all), and
    Schemathesis's reading of the sent form models neither repeated fields as lists nor file
    parts, so it reports forms that are valid on the wire as accepted invalid data. Multipart
    requests are checked for 5xx only; their invalid values (formats, ranges, speaker options,
    broken forms) are tests/corpus/bad_audio.py's."""
    if (case.media_type or "").startswith("multipart/"):
        return [not_a_server_error]
    return [not_a_server_error, negative_data_rejection]
