"""OminiX-API's family names in process: the `model` aliases of every slot (which model they
reach, what responses echo, /v1/models), and the per-family audio routes (/v1/audio/tts/*,
/v1/audio/asr/*): served by a model of the family, 404 model_not_found without one."""

from __future__ import annotations

import base64

import httpx
import pytest

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.ingress.test_models import DEFAULTS, FakeControl

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
QWEN3_TTS = "mlx-community/Qwen3-TTS-12Hz-0.6B-Base-bf16"
PARAFORMER = "funaudiollm/paraformer-large-mlx"


def _client(slots, **blocks) -> httpx.AsyncClient:
    args = shipped_args(**{name: {**shipped_args()[name], **block} for name, block in blocks.items()})
    app = create_app(ingress_state(GraphArgs.from_args(args, environ={}), slots))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ingress.test")


@pytest.mark.parametrize("name", ["qwen3", "Mistral", "GLM"])
async def test_llm_family_names_reach_the_slot_default_and_echo_the_served_model(http, slots, name):
    r = await http.post("/v1/chat/completions", json={**CHAT, "model": name})
    assert r.status_code == 200, r.text
    assert slots["llm"].calls[0][2] is None  # the slot's current default, chosen by the replica
    assert r.json()["model"] == "ominix-tiny-qwen3"  # the fake replica's served model, not the alias


@pytest.mark.parametrize("name", ["paraformer", "qwen3-asr", "SenseVoice"])
async def test_asr_family_names_in_the_json_form(http, slots, name):
    body = {"file": base64.b64encode(b"RIFF....").decode(), "model": name}
    r = await http.post("/v1/audio/transcriptions", json=body)
    assert r.status_code == 200 and r.json()["text"] == "hello world"
    assert slots["asr"].calls[0][2] is None


@pytest.mark.parametrize("name", ["gpt-sovits", "qwen3-tts"])
async def test_tts_family_names(http, slots, name):
    r = await http.post("/v1/audio/speech", json={"input": "Hi.", "model": name})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"
    assert slots["tts"].calls[0][2] is None


@pytest.mark.parametrize(
    "path, body, slot",
    [
        ("/v1/audio/transcriptions", {"file": base64.b64encode(b"RIFF....").decode(), "model": "whisper-1"}, "asr"),
        (
            "/v1/audio/transcriptions",
            {"file": base64.b64encode(b"RIFF").decode(), "model": "gpt-4o-mini-transcribe"},
            "asr",
        ),
        ("/v1/audio/speech", {"input": "Hi.", "model": "tts-1"}, "tts"),
        ("/v1/audio/speech", {"input": "Hi.", "model": "gpt-4o-mini-tts", "voice": "alloy"}, "tts"),
        ("/v1/images/generations", {"prompt": "a cat", "model": "dall-e-3"}, "image"),
        ("/v1/embeddings", {"input": "x", "model": "text-embedding-3-small"}, "embeddings"),
    ],
)
async def test_openais_model_names_reach_the_slot_default(http, slots, path, body, slot):
    """What the openai SDK's users write (`model` is required there): OpenAI's names for
    speech, transcription, images and embeddings name the slot's default, as OminiX-API serves
    them with whatever is loaded."""
    slots["image"].answers["generate"] = _one_image
    r = await http.post(path, json=body)
    assert r.status_code == 200, r.text
    assert slots[slot].calls[0][2] is None  # the slot's default, chosen by the replica


async def test_image_aliases_name_their_model_when_allowed_else_the_default():
    slots = default_slots()
    async with _client(slots, image={"models": ["black-forest-labs/FLUX.2-klein-4B"]}) as http:
        await http.post("/v1/images/generations", json={"prompt": "a cat", "model": "flux"})
        await http.post("/v1/images/generations", json={"prompt": "a cat", "model": "zimage"})
    # flux is allowed here: it is served; Z-Image-Turbo is not: the slot's default serves
    assert [model for _, _, model in slots["image"].calls] == ["black-forest-labs/FLUX.2-klein-4B", None]


async def test_an_alias_never_reaches_a_model_outside_the_allow_list():
    slots = default_slots()
    async with _client(slots, llm={"aliases": {"qwen3": "mlx-community/Qwen3-8B-8bit"}}) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, "model": "qwen3"})
        assert r.status_code == 200 and slots["llm"].calls[0][2] is None
        # the target itself, named directly, stays refused
        r = await http.post("/v1/chat/completions", json={**CHAT, "model": "mlx-community/Qwen3-8B-8bit"})
        assert_openai_error(r, 404, code="model_not_found")


async def test_aliases_can_be_switched_off_and_pointed_at_an_allowed_model():
    slots = default_slots()
    async with _client(slots, llm={"aliases": {"tiny": "ominix-tiny-qwen3"}}) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, "model": "qwen3"})
        assert_openai_error(r, 404, code="model_not_found")  # not configured any more
        r = await http.post("/v1/chat/completions", json={**CHAT, "model": "TINY"})
        assert r.status_code == 200 and slots["llm"].calls[-1][2] == "ominix-tiny-qwen3"


async def test_models_list_names_every_alias_and_its_model(http):
    cards = {card["id"]: card for card in (await http.get("/v1/models")).json()["data"]}
    assert cards["qwen3"]["alias_of"] == "ominix-smollm2-135m-instruct" and cards["qwen3"]["type"] == "llm"
    assert cards["paraformer"]["alias_of"] == "whisper-tiny.en"
    assert cards["gpt-sovits"]["alias_of"] == "ominix-kokoro-82m"  # the slot default
    assert cards["flux"]["alias_of"] == "ominix-tiny-flux2-klein"  # FLUX.2-klein-4B is not allowed here
    assert cards["ominix-tiny-qwen3"]["alias_of"] is None
    assert cards["whisper-1"]["alias_of"] == "whisper-tiny.en" and cards["tts-1"]["alias_of"] == "ominix-kokoro-82m"
    assert (await http.get("/v1/models/qwen3")).json()["alias_of"] == "ominix-smollm2-135m-instruct"


async def test_load_by_alias_loads_the_model_it_names():
    control = FakeControl(DEFAULTS)
    args = shipped_args(image={**shipped_args()["image"], "models": ["black-forest-labs/FLUX.2-klein-4B"]})
    app = create_app(ingress_state(GraphArgs.from_args(args, environ={}), default_slots(), control=control))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.post("/v1/models/load", json={"model": "flux", "model_type": "image"})
        assert r.status_code == 200 and r.json()["model"] == "black-forest-labs/FLUX.2-klein-4B", r.text
        # `qwen3` names the LLM slot's configured default: loading it (re)loads that
        r = await http.post("/v1/models/load", json={"model": "qwen3", "model_type": "llm"})
        assert r.status_code == 200 and r.json()["model"] == "ominix-smollm2-135m-instruct", r.text


# ------------------------------------------------------------------ the per-family routes

FAMILY_ROUTES = [
    ("/v1/audio/tts/qwen3", {"json": {"input": "Hi."}}, "tts", "qwen3-tts"),
    (
        "/v1/audio/tts/clone",
        {"data": {"input": "Hi."}, "files": {"reference_audio": ("r.wav", b"RIFF")}},
        "tts",
        "qwen3-tts",
    ),
    ("/v1/audio/tts/sovits", {"json": {"input": "Hi.", "voice": "doubao"}}, "tts", "gpt-sovits"),
    ("/v1/audio/asr/qwen3", {"json": {"file": base64.b64encode(b"RIFF").decode()}}, "asr", "qwen3-asr"),
    ("/v1/audio/asr/paraformer", {"json": {"file": base64.b64encode(b"RIFF").decode()}}, "asr", "paraformer"),
]


@pytest.mark.parametrize(("path", "kwargs", "slot", "family"), FAMILY_ROUTES)
async def test_a_family_route_without_a_model_of_its_family_is_a_404(http, slots, path, kwargs, slot, family):
    r = await http.post(path, **kwargs)
    error = assert_openai_error(r, 404, param="model", code="model_not_found")
    assert family in error["message"]
    assert not slots[slot].calls  # never the slot's default in its stead


@pytest.mark.parametrize(("path", "kwargs", "slot", "family"), FAMILY_ROUTES)
async def test_a_family_route_runs_the_allowed_model_of_its_family(path, kwargs, slot, family):
    slots = default_slots()
    blocks = {
        "tts": {"models": [QWEN3_TTS, "acme/gpt-sovits-v2-mlx"]},
        "asr": {"models": [PARAFORMER, "mlx-community/Qwen3-ASR-0.6B-8bit"]},
    }
    async with _client(slots, **blocks) as http:
        r = await http.post(
            path, **{**kwargs, **({"json": {**kwargs["json"], "model": "whisper-tiny.en"}} if "json" in kwargs else {})}
        )
    assert r.status_code == 200, r.text
    expected = {"qwen3-tts": QWEN3_TTS, "gpt-sovits": "acme/gpt-sovits-v2-mlx", "paraformer": PARAFORMER}
    assert slots[slot].calls[0][2] == expected.get(family, "mlx-community/Qwen3-ASR-0.6B-8bit")


async def test_an_explicit_alias_target_makes_any_allowed_model_the_family():
    slots = default_slots()
    async with _client(slots, tts={"aliases": {"gpt-sovits": "ominix-kokoro-82m"}}) as http:
        r = await http.post("/v1/audio/tts/sovits", json={"input": "Hi.", "response_format": "pcm"})
    assert r.status_code == 200 and r.content[:4] == b"RIFF"  # sovits always answers a WAV file
    assert slots["tts"].calls[0][2] == "ominix-kokoro-82m"


async def test_family_routes_of_a_disabled_slot_say_so():
    async with _client(default_slots(), tts={"enabled": False}, asr={"enabled": False}) as http:
        for path, kwargs, _, _ in FAMILY_ROUTES:
            assert_openai_error(await http.post(path, **kwargs), 404, code="slot_disabled")


async def test_family_routes_check_their_request_shapes(http):
    tts = {"models": [QWEN3_TTS]}
    async with _client(default_slots(), tts=tts) as http:
        assert_openai_error(await http.post("/v1/audio/tts/qwen3", json={"voice": "x"}), 400)
        assert_openai_error(await http.post("/v1/audio/tts/qwen3", json={"input": "x", "speed": 9}), 400)
        assert_openai_error(await http.post("/v1/audio/tts/clone", data={"input": "Hi."}), 400)
        empty = {"reference_audio": ("r.wav", b"")}
        assert_openai_error(await http.post("/v1/audio/tts/clone", data={"input": "Hi."}, files=empty), 400)
    asr = {"models": [PARAFORMER]}
    async with _client(default_slots(), asr=asr) as http:
        r = await http.post("/v1/audio/asr/paraformer", json={"file": "not base64!"})
        assert_openai_error(r, 400, param="file")
        assert_openai_error(await http.post("/v1/audio/asr/paraformer", json={}), 400, param="file")


# ------------------------------------------------------------------ shell-built JSON (the README's curl)


def _one_image(params, model=None):
    from deployments.protocol.images import GeneratedImages

    return GeneratedImages(model="ominix-tiny-flux2-klein", images=[b"\x89PNG"], seeds=[1], output_format="png")


def _wrapped_base64(data: bytes) -> str:
    """What GNU `base64 file` prints: lines of 76 columns."""
    text = base64.b64encode(data).decode()
    return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))


@pytest.mark.parametrize(
    ("path", "field", "slot"),
    [("/v1/audio/transcriptions", "file", "asr"), ("/v1/images/generations", "image", "image")],
)
async def test_line_wrapped_base64_inside_the_json_string_is_accepted(http, slots, path, field, slot):
    payload = bytes(range(256)) * 2
    slots["image"].answers["generate"] = _one_image
    model = "paraformer" if slot == "asr" else "zimage"
    raw = f'{{"{field}": "{_wrapped_base64(payload)}", "prompt": "p", "model": "{model}"}}'
    assert "\n" in raw
    r = await http.post(path, content=raw.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text
    args = slots[slot].calls[0][1]
    sent = args[1] if slot == "asr" else args[0].init_image
    assert sent == payload


async def test_broken_base64_is_still_a_400(http):
    raw = '{"file": "QUJD\nR!==", "model": "paraformer"}'
    r = await http.post("/v1/audio/transcriptions", content=raw, headers={"content-type": "application/json"})
    assert_openai_error(r, 400, param="file")
    raw = '{"prompt": "p", "image": "QUJD\n!!"}'
    r = await http.post("/v1/images/generations", content=raw, headers={"content-type": "application/json"})
    assert_openai_error(r, 400, param="image")
