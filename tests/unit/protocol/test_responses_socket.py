"""The Responses WebSocket's pure parts: a client message as the request it carries (HTTP's
transport fields refused by name), and the spec's error envelope."""

from __future__ import annotations

import json

import pytest

from deployments.protocol.errors import APIError, invalid_request
from deployments.protocol.responses_socket import connection_limit_reached, create_request, error_envelope
from tests.open_responses import socket_error_problems


def test_a_create_message_is_the_request_it_carries_streamed():
    message = {"type": "response.create", "model": "m", "input": "Hi", "store": False}
    assert create_request(json.dumps(message)) == {"model": "m", "input": "Hi", "store": False, "stream": True}


@pytest.mark.parametrize(
    "text, param, code",
    [
        ("{", None, "invalid_json"),
        ("[1]", None, "invalid_event"),
        ('{"model": "m"}', "type", "unknown_event"),
        ('{"type": "response.cancel"}', "type", "unknown_event"),
        ('{"type": "response.create", "stream": false}', "stream", "unsupported_parameter"),
        ('{"type": "response.create", "background": false}', "background", "unsupported_parameter"),
        ('{"type": "response.create", "stream_options": {}}', "stream_options", "unsupported_parameter"),
    ],
)
def test_anything_else_is_a_400_naming_what(text, param, code):
    with pytest.raises(APIError) as e:
        create_request(text)
    assert (e.value.status_code, e.value.param, e.value.code) == (400, param, code)


@pytest.mark.parametrize("error", [invalid_request("temperature: too hot", "temperature"), connection_limit_reached()])
def test_the_error_envelope_is_the_specs(error):
    envelope = error_envelope(error)
    assert socket_error_problems(envelope) == []
    assert envelope["error"]["code"] == (error.code or "invalid_request_error")


def test_the_checker_finds_what_an_envelope_lacks():
    assert socket_error_problems({"type": "error", "error": {"message": "x"}}) != []
