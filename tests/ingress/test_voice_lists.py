"""The voice and model lists TTS clients read (GET /v1/audio/voices, /v1/audio/models,
deployments/ingress/serving/voices.py): Open WebUI's OpenAI engine fills its voice menu with
`{"voices": [{"id", "name"}]}` and its model menu with `{"models": [{"id"}]}`."""

from __future__ import annotations

import pytest

from tests.assertions import assert_openai_error

LISTING = {
    "default_voice": "af_heart",
    "voices": [
        {"name": "narrator", "aliases": ["nar"], "source": "registry"},
        {"name": "af_alloy", "aliases": ["alloy"], "source": "preset"},
        {"name": "af_heart", "aliases": [], "source": "preset"},
    ],
}


@pytest.fixture
def tts(slots):
    slots["tts"].answers["voices"] = lambda model=None: LISTING
    return slots["tts"]


async def test_voices_come_default_first_with_the_names_they_answer_to(http, tts):
    r = await http.get("/v1/audio/voices")
    assert r.status_code == 200
    assert r.json() == {
        "voices": [
            {"id": "af_heart", "name": "af_heart"},
            {"id": "narrator", "name": "narrator (nar)"},
            {"id": "af_alloy", "name": "af_alloy (alloy)"},
        ]
    }
    assert tts.calls[-1] == ("voices", (), None)  # the slot's default model


async def test_a_models_voices_are_asked_of_that_model(http, tts, state):
    model = state.catalog.ids("tts")[-1]
    assert (await http.get("/v1/audio/voices", params={"model": model})).status_code == 200
    assert tts.calls[-1] == ("voices", (), model)
    assert_openai_error(await http.get("/v1/audio/voices", params={"model": "nope"}), 404, "model")
    assert len(tts.calls) == 1


async def test_the_models_are_the_tts_slots(http, state):
    r = await http.get("/v1/audio/models")
    assert r.status_code == 200 and r.json() == {"models": [{"id": m} for m in state.catalog.ids("tts")]}
    assert len(r.json()["models"]) >= 2
