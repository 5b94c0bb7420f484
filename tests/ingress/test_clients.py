"""The ingress's deployment clients over a stand-in for Ray's DeploymentHandle: options are
cached per (model, stream), a session key is added per request, errors come back OpenAI-shaped."""

from __future__ import annotations

import pytest

from deployments.ingress.clients import DeploymentClient
from deployments.protocol.errors import APIError


class Handle:
    """Ray's DeploymentHandle surface the client uses: .options(**kw) and .<method>.remote()."""

    made: list[dict] = []

    def __init__(self, options=None, answer=None):
        self.options_set = options or {}
        self.answer = answer

    def options(self, **kw):
        Handle.made.append(kw)
        return Handle({**self.options_set, **kw}, self.answer)

    def __getattr__(self, method):
        handle = self

        class Method:
            def remote(self, *args):
                return handle._call(method, args)

        return Method()

    async def _call(self, method, args):
        if isinstance(self.answer, BaseException):
            raise self.answer
        return {"method": method, "args": args, "options": self.options_set}


async def test_configured_handles_are_cached_and_sessions_added_per_request():
    Handle.made.clear()
    client = DeploymentClient(Handle())
    first = await client.call("status", 1, model="m")
    await client.call("status", 2, model="m")
    keyed = await client.call("status", 3, model="m", session="conv-1")
    assert first["options"] == {"multiplexed_model_id": "m", "stream": False}
    assert keyed["options"]["session_id"] == "conv-1" and keyed["args"] == (3,)
    assert Handle.made == [{"multiplexed_model_id": "m", "stream": False}, {"session_id": "conv-1"}]


async def test_an_error_crossing_the_handle_is_an_openai_error():
    client = DeploymentClient(Handle(answer=APIError(404, "no such voice", code="voice_not_found")))
    with pytest.raises(APIError) as e:
        await client.call("voices")
    assert e.value.status_code == 404 and e.value.code == "voice_not_found"
    broken = DeploymentClient(Handle(answer=RuntimeError("boom")))
    with pytest.raises(APIError) as e:
        await broken.call("voices")
    assert e.value.status_code == 500 and "boom" in e.value.message
