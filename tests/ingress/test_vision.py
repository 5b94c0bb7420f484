"""Vision chat and /v1/vlm/completions in process: routing by the requested model id only,
images loaded and checked before the slot (data URLs; remote URLs only when allowed, from a
real local HTTP server), and every bad image a 400 naming the part and the problem."""

from __future__ import annotations

import base64
import http.server
import io
import json
import threading
import time

import httpx
import pytest
from PIL import Image

from deployments.ingress.app import create_app
from graphs.config import GraphArgs
from tests.assertions import assert_openai_error
from tests.ingress.conftest import default_slots, ingress_state, shipped_args

VLM = "ominix-tiny-qwen2-vl"
LLM = "ominix-tiny-qwen3"


def png(width: int = 32, height: int = 24) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def chat(model, *urls, text="What is in the image?", stream=False) -> dict:
    parts = [{"type": "image_url", "image_url": {"url": u}} for u in urls]
    return {
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}],
    }


@pytest.fixture
def make_client(tmp_path):
    made = []

    def make(**vlm_args):
        slots = default_slots()
        args = shipped_args(cache_dir=str(tmp_path))
        args["vlm"] = {**args["vlm"], **vlm_args}
        config = GraphArgs.from_args(args, environ={})
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(ingress_state(config, slots))), base_url="http://t", timeout=30
        )
        made.append(client)
        return client, slots

    yield make


async def test_an_image_chat_to_a_vlm_id_reaches_the_vlm_slot_with_its_image(make_client):
    http, slots = make_client()
    image = png()
    r = await http.post("/v1/chat/completions", json=chat(VLM, data_url(image)))
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "A red square" and r.json()["model"] == VLM
    ((method, (request, images), model),) = slots["vlm"].calls
    assert (method, model, images) == ("chat", VLM, [image]) and request.has_images()
    assert not slots["llm"].calls


async def test_streaming_image_chat_comes_as_sse_chunks(make_client):
    http, _ = make_client()
    r = await http.post("/v1/chat/completions", json=chat(VLM, data_url(png()), stream=True))
    events = [line.removeprefix("data: ") for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(
        json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1] if json.loads(e)["choices"]
    )
    assert text == "A red square"


async def test_text_chat_without_a_model_stays_on_the_llm(make_client):
    http, slots = make_client()
    r = await http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and slots["llm"].calls and not slots["vlm"].calls


@pytest.mark.parametrize("model", [LLM, None])
async def test_image_parts_to_a_text_only_model_are_a_400_never_a_guess(make_client, model):
    http, slots = make_client()
    r = await http.post("/v1/chat/completions", json=chat(model, data_url(png())))
    error = assert_openai_error(r, 400, param="messages", code="image_input_unsupported")
    assert "text-only" in error["message"] and VLM in error["message"]
    assert not slots["llm"].calls and not slots["vlm"].calls


@pytest.mark.parametrize(
    "url, code, words",
    [
        (data_url(b"not an image at all"), "invalid_image", "could not be decoded"),
        (data_url(png()[:40]), "invalid_image", "could not be decoded"),  # truncated PNG
        ("data:image/png;base64,@@@@", "invalid_image", "not valid base64"),
        ("data:text/plain;base64,aGVsbG8=", "invalid_image", "data:image/<type>;base64"),
        ("file:///etc/passwd", "invalid_image", "unsupported image URL"),
        ("https://example.com/cat.png", "remote_images_disabled", "data URLs are required"),
    ],
)
async def test_a_bad_image_is_a_400_naming_its_part(make_client, url, code, words):
    http, slots = make_client()
    r = await http.post("/v1/chat/completions", json=chat(VLM, data_url(png()), url))
    error = assert_openai_error(r, 400, param="messages[0].content[1]", code=code)
    assert words in error["message"]
    assert not slots["vlm"].calls


async def test_an_image_part_without_a_url_is_a_400(make_client):
    http, _ = make_client()
    body = {"model": VLM, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}
    assert_openai_error(await http.post("/v1/chat/completions", json=body), 400, param="messages[0].content[0]")


async def test_too_many_and_too_large_images_are_400s(make_client):
    http, slots = make_client(max_images=2, max_image_mb=0.001, max_image_pixels=100 * 100)
    small = data_url(png(8, 8))
    assert_openai_error(
        await http.post("/v1/chat/completions", json=chat(VLM, small, small, small)), 400, "messages", "too_many_images"
    )
    big = data_url(png(400, 400))  # ~1.5 KB of PNG is over 0.001 MB
    error = assert_openai_error(
        await http.post("/v1/chat/completions", json=chat(VLM, big)), 400, code="image_too_large"
    )
    assert "bytes" in error["message"]
    http, _ = make_client(max_image_pixels=100 * 100)
    error = assert_openai_error(
        await http.post("/v1/chat/completions", json=chat(VLM, data_url(png(200, 60)))), 400, code="image_too_large"
    )
    assert "200x60 pixels" in error["message"]
    assert not slots["vlm"].calls


class ImageServer(http.server.BaseHTTPRequestHandler):
    """A remote image host: /ok a PNG, /big an endless body, /slow a late answer, else 404."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/slow":
            time.sleep(2)
        if self.path in ("/ok", "/slow"):
            body = png()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/big":
            self.send_response(200)
            self.end_headers()
            for _ in range(64):
                self.wfile.write(b"\0" * 65536)
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # the client hanging up on /big is the point
        pass


@pytest.fixture
def image_host():
    server = QuietServer(("127.0.0.1", 0), ImageServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


async def test_remote_urls_are_fetched_only_when_allowed_with_a_cap_and_a_timeout(make_client, image_host):
    http, slots = make_client(allow_remote_images=True, max_image_mb=0.5, remote_image_timeout_s=0.5)
    assert (await http.post("/v1/chat/completions", json=chat(VLM, f"{image_host}/ok"))).status_code == 200
    assert slots["vlm"].calls[0][1][1] == [png()]
    for path, code, words in [
        ("/big", "image_too_large", "over"),
        ("/slow", "invalid_image", "could not be fetched"),
        ("/missing", "invalid_image", "HTTP 404"),
    ]:
        r = await http.post("/v1/chat/completions", json=chat(VLM, f"{image_host}{path}"))
        assert words in assert_openai_error(r, 400, code=code)["message"], path


async def test_vlm_completions_answer_in_ominix_shape_with_real_usage(make_client):
    http, slots = make_client()
    image = png()
    r = await http.post(
        "/v1/vlm/completions", json={"image": base64.b64encode(image).decode(), "prompt": "Describe it."}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "vlm.completion" and body["id"].startswith("vlm-") and body["content"] == "A red square"
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["total_tokens"] == 3 + 3  # the slot's counts
    ((_, (request, images), _),) = slots["vlm"].calls
    assert images == [image] and request.messages[0].text() == "Describe it."


@pytest.mark.parametrize(
    "body, param",
    [
        ({"image": base64.b64encode(b"garbage").decode(), "prompt": "x"}, "image"),
        ({"image": "", "prompt": "x"}, "image"),
        ({"prompt": "x"}, "image"),
        ({"image": "aGk=", "prompt": ""}, "prompt"),
        ({"image": "aGk=", "prompt": "x", "model": LLM}, "model"),
    ],
)
async def test_bad_vlm_completions_are_4xx_naming_the_field(make_client, body, param):
    http, slots = make_client()
    r = await http.post("/v1/vlm/completions", json=body)
    assert r.status_code in (400, 404), r.text
    assert_openai_error(r, r.status_code, param=param)
    assert not slots["vlm"].calls


async def test_with_the_vlm_slot_off_image_chat_says_no_vision_model_is_served(make_client, tmp_path):
    slots = default_slots()
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path), vlm={"enabled": False}), environ={})
    app = create_app(ingress_state(config, slots))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http:
        r = await http.post("/v1/chat/completions", json=chat(VLM, data_url(png())))
        error = assert_openai_error(r, 400, param="messages", code="image_input_unsupported")
        assert "no vision model is served" in error["message"]
        off = await http.post("/v1/vlm/completions", json={"image": "aGk=", "prompt": "x"})
        assert_openai_error(off, 404, code="slot_disabled")
