"""What the Schemathesis runs of both layers share (tests/ingress/test_schema_fuzz.py in process,
tests/e2e/test_schema_fuzz.py on the live graph): the checks a generated request must pass."""

from __future__ import annotations

import json

import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection

from deployments.ingress.errors import speaks_anthropic

OPENAI_ERROR_KEYS = {"message", "type", "param", "code"}


@schemathesis.check
def error_body_of_the_protocol(ctx, response, case):
    """A 4xx carries the error body of the route's protocol (deployments/ingress/errors.py):
    Anthropic's on /v1/messages, OpenAI's (exactly its four keys, a message) everywhere else."""
    if not 400 <= response.status_code < 500:
        return None
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"a {response.status_code} whose body is not JSON: {response.content[:200]!r}") from exc
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"], body
    if speaks_anthropic(case.formatted_path):
        assert body.get("type") == "error" and isinstance(error.get("type"), str), body
    else:
        assert set(error) == OPENAI_ERROR_KEYS, body
    return None


def checks_for(case) -> list:
    """`not_a_server_error` (no 5xx, whatever is sent), `negative_data_rejection` (a request the
    schema calls invalid is refused with a 4xx, never served) and the protocol's error body on
    every 4xx.

    A multipart form carries text parts and files only: a wrong JSON type cannot be sent in one
    (1 and null arrive as the strings "1" and "null", an empty list as no part at all), and
    Schemathesis's reading of the sent form models neither repeated fields as lists nor file
    parts, so it reports forms that are valid on the wire as accepted invalid data. Multipart
    requests are not held to `negative_data_rejection`; their invalid values (formats, ranges,
    speaker options, broken forms) are tests/corpus/bad_audio.py's."""
    if (case.media_type or "").startswith("multipart/"):
        return [not_a_server_error, error_body_of_the_protocol]
    return [not_a_server_error, negative_data_rejection, error_body_of_the_protocol]
