"""POST /v1/images/generations and /v1/models/quantize through the real graph, on the built-in
tiny FLUX.2-klein (mflux, random weights): the openai SDK's images.generate, seeds, img2img,
output formats, errors, the model list and status, mflux quantization, and chat and ASR
completing while a long generation runs (which a client hang-up then stops)."""

from __future__ import annotations

import asyncio
import base64
import io
import time

import httpx
import openai
import pytest

from tests.assertions import assert_openai_error
from tests.speech import encode, speak

TINY = "ominix-tiny-flux2-klein"
SMALL = {"size": "32x32", "steps": 2}  # a few seconds on 2 CPU cores


def _image(b64: str):
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(b64)))
    image.load()
    return image


def _png_b64(color=(200, 30, 30), size=(40, 40)) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def generate(http, **body):
    return http.post("/v1/images/generations", json={"prompt": "a red fox", **SMALL, **body}, timeout=300)


def test_sdk_generates_a_png_of_the_requested_size(client):
    result = client.images.generate(
        model=TINY, prompt="a lighthouse at dusk", size="48x32", n=2, extra_body={"steps": 2, "seed": 11}
    )
    assert result.created > 0 and len(result.data) == 2
    for item in result.data:
        image = _image(item.b64_json)
        assert (image.format, image.size) == ("PNG", (48, 32))
        assert item.revised_prompt == "a lighthouse at dusk"
    assert result.data[0].b64_json != result.data[1].b64_json  # seeds 11 and 12


def test_same_seed_same_image(http):
    first, again, other = (generate(http, seed=s) for s in (42, 42, 43))
    for r in (first, again, other):
        assert r.status_code == 200, r.text
    assert first.json()["data"][0]["b64_json"] == again.json()["data"][0]["b64_json"]
    assert first.json()["data"][0]["b64_json"] != other.json()["data"][0]["b64_json"]
    assert first.json()["data"][0]["seed"] == 42 and first.json()["model"] == TINY


def test_img2img_uses_the_image(http):
    red, blue = (
        generate(http, seed=1, steps=4, image=_png_b64(c), strength=0.5) for c in ((220, 20, 20), (20, 20, 220))
    )
    plain = generate(http, seed=1, steps=4)
    for r in (red, blue, plain):
        assert r.status_code == 200, r.text
    images = [r.json()["data"][0]["b64_json"] for r in (red, blue, plain)]
    assert len(set(images)) == 3 and _image(images[0]).size == (32, 32)
    data_url = generate(http, seed=1, steps=4, image="data:image/png;base64," + _png_b64((220, 20, 20)), strength=0.5)
    assert data_url.json()["data"][0]["b64_json"] == images[0]


@pytest.mark.parametrize("fmt,pil", [("jpeg", "JPEG"), ("webp", "WEBP")])
def test_output_formats(http, fmt, pil):
    r = generate(http, output_format=fmt, output_compression=70)
    assert r.status_code == 200, r.text
    assert r.json()["output_format"] == fmt and _image(r.json()["data"][0]["b64_json"]).format == pil


@pytest.mark.parametrize(
    "body,param",
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": "   "}, "prompt"),
        ({"size": "30x30"}, "size"),
        ({"size": "4096x4096"}, "size"),
        ({"size": "big"}, "size"),
        ({"n": 0}, "n"),
        ({"n": 11}, "n"),
        ({"strength": 1.5, "image": _png_b64()}, "strength"),
        ({"strength": -0.5, "image": _png_b64()}, "strength"),
        ({"image": "not base64!"}, "image"),
        ({"image": base64.b64encode(b"this is not an image").decode()}, "image"),
        ({"response_format": "url"}, "response_format"),
        ({"output_format": "gif"}, "output_format"),
        ({"negative_prompt": "blurry"}, "negative_prompt"),  # FLUX.2-klein takes none
        ({"steps": 0}, "steps"),
    ],
)
def test_bad_input_is_a_400(http, body, param):
    assert_openai_error(generate(http, **body), 400, param=param)


def test_sdk_sees_errors_and_unknown_models(client):
    with pytest.raises(openai.BadRequestError):
        client.images.generate(model=TINY, prompt="x", size="1000x1000")
    with pytest.raises(openai.NotFoundError):
        client.images.generate(model="no/such-model", prompt="x", size="32x32")


def test_an_alias_of_a_model_not_allowed_names_the_default(http):
    # `flux` names black-forest-labs/FLUX.2-klein-4B, which the default config does not allow:
    # OminiX-API's clients get the slot's model, never that repo (docs/api/models.md#aliases).
    r = generate(http, model="flux")
    assert r.status_code == 200 and r.json()["model"] == TINY
    assert_openai_error(generate(http, model="black-forest-labs/FLUX.2-klein-4B"), 404, param="model")


def test_listed_with_slot_image_and_under_the_control_plane(http):
    models = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    assert models[TINY]["type"] == "image" and models[TINY]["endpoints"] == ["/v1/images/generations"]
    status = http.get("/v1/models/status").json()
    assert status["models"]["image"] == TINY
    assert all(r["default_model"] == TINY for r in status["slots"]["image"]["replicas"])
    assert http.get("/readyz").json()["slots"]["image"]["ready"] is True


def test_quantize_writes_an_8_bit_copy_that_serves(http):
    r = http.post("/v1/models/quantize", json={"model_id": TINY}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "success" and body["bits"] == 8 and body["path"] in body["message"]
    again = http.post("/v1/models/quantize", json={"model_id": TINY}, timeout=300).json()
    assert again["reused"] is True and again["path"] == body["path"]
    # The copy lives in the image slot's models directory: requests may name it by path.
    served = generate(http, model=body["path"], seed=3)
    assert served.status_code == 200, served.text
    assert served.json()["model"] == body["path"] and _image(served.json()["data"][0]["b64_json"]).size == (32, 32)
    assert generate(http, seed=3).status_code == 200  # the default model again


def test_load_and_unload_through_the_control_plane(http):
    """model_type "image": the quantized copy becomes every replica's default, an unload
    empties the slot (503), and loading the tiny model restores it."""
    path = http.post("/v1/models/quantize", json={"model_id": TINY}, timeout=300).json()["path"]
    try:
        r = http.post("/v1/models/load", json={"model": path, "model_type": "image"}, timeout=300)
        assert r.status_code == 200, r.text
        assert generate(http).json()["model"] == path
        assert http.get("/v1/models/status").json()["models"]["image"] == path
        r = http.post("/v1/models/unload", json={"model_type": "image"}, timeout=60)
        assert r.status_code == 200, r.text
        assert_openai_error(generate(http), 503)
        assert http.get("/readyz").json()["slots"]["image"]["ready"] is False
    finally:
        r = http.post("/v1/models/load", json={"model": TINY, "model_type": "image"}, timeout=300)
    assert r.status_code == 200, r.text
    assert generate(http).json()["model"] == TINY


@pytest.mark.parametrize(
    "body", [{"model_id": "ominix-tiny-qwen3"}, {"model_id": "whisper-tiny.en"}, {"model_id": "x", "bits": 7}]
)
def test_quantize_refusals(http, body):
    error = assert_openai_error(http.post("/v1/models/quantize", json=body), 400)
    if "bits" not in body:
        assert "image" in error["message"] and TINY in error["message"]


async def _until_a_replica_reports(http, predicate, what: str, timeout_s: float = 180) -> dict:
    """Poll GET /metrics until an image replica's stats satisfy `predicate` (each call reaches
    one replica; a second one may be up while the long generation runs)."""
    deadline = time.time() + timeout_s
    while True:
        stats = http.get("/metrics").json()["image"]["models"].get(TINY, {})
        if predicate(stats):
            return stats
        assert time.time() < deadline, what
        await asyncio.sleep(0.5)


async def test_chat_and_asr_complete_while_a_generation_runs_then_a_hang_up_stops_it(server, http):
    """A long generation (10 images x 100 steps: minutes) is running; chat and a transcription
    finish meanwhile; then the client hangs up and the slot stops the generation.

    Chat and ASR are warmed up first: their first-call costs are not what is tested, and on a
    loaded 2-core machine a generation leaves them little CPU (slower, never blocked)."""
    other = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=300)
    wav = encode(speak("Hello world."), 16000, "wav")

    def chat_and_asr():
        return asyncio.gather(
            other.chat.completions.create(
                messages=[{"role": "user", "content": "hi"}], model="ominix-tiny-qwen3", max_tokens=4
            ),
            other.audio.transcriptions.create(model="whisper-tiny.en", file=("hello.wav", wav)),
        )

    await chat_and_asr()
    body = {"prompt": "a very long job", "size": "64x64", "n": 10, "steps": 100, "seed": 5}
    async with httpx.AsyncClient(base_url=server, timeout=900) as image_client:
        job = asyncio.create_task(image_client.post("/v1/images/generations", json=body))
        running = await _until_a_replica_reports(
            http, lambda s: (s.get("in_progress") or {}).get("step"), "the generation never started"
        )
        assert running["in_progress"]["steps"] == 100 and running["in_progress"]["images"] == 10
        chat, transcript = await chat_and_asr()
        assert chat.choices[0].message is not None and "world" in transcript.text.lower()
        # The image response only comes when the generation ends: it is still running.
        assert not job.done(), "the generation ended before chat and ASR did"
        progress = (await _until_a_replica_reports(http, lambda s: s.get("in_progress"), "no progress"))["in_progress"]
        print(
            f"\nchat and ASR done while the generation was at image {progress['image']}/10 step {progress['step']}/100"
        )
        job.cancel()  # the client goes away: the connection closes
    await _until_a_replica_reports(
        http,
        lambda s: s.get("cancelled", 0) >= 1 and s.get("in_progress") is None,
        "the abandoned generation kept running",
    )
    await other.close()


def test_sdk_edit_is_img2img_of_the_uploaded_image(client, http):
    """The openai SDK's images.edit (multipart) answers what /v1/images/generations answers for
    the same image as base64, seed and strength; a mask is refused by name."""
    red = base64.b64decode(_png_b64((220, 20, 20)))
    edited = client.images.edit(
        model=TINY,
        image=("red.png", red, "image/png"),
        prompt="a red fox",
        size="32x32",
        extra_body={"steps": 2, "seed": 5, "strength": 0.5},
    )
    same = generate(http, seed=5, image=_png_b64((220, 20, 20)), strength=0.5)
    assert same.status_code == 200, same.text
    assert edited.data[0].b64_json == same.json()["data"][0]["b64_json"]
    assert _image(edited.data[0].b64_json).size == (32, 32)
    with pytest.raises(openai.BadRequestError) as error:
        client.images.edit(model=TINY, image=("red.png", red), mask=("m.png", red), prompt="a fox", size="32x32")
    assert error.value.body["param"] == "mask"
