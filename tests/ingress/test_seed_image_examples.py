"""OminiX-API's README image examples (seed 000), run verbatim by bash and curl against the
ingress in process: `create_app()` over fake slots, served by uvicorn on a loopback port.

On the live graph these examples ask the tiny FLUX.2-klein for 512x512 and 1024x1024 images,
1.5-10 minutes of a 2-core CPU each (tests/e2e/test_seed_examples.py runs them with
OMINIX_SLOW_EXAMPLES=1). What they check of this server is the ingress's: the request as written
is accepted, its model alias and size reach the image slot, img2img's base64 init image is
decoded, and the answer is OpenAI's JSON. The image slot itself generates end to end in
tests/e2e/test_images_api.py.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess

import pytest
from PIL import Image

from deployments.ingress.app import create_app
from deployments.protocol.images import GeneratedImages
from graphs.config import GraphArgs
from tests.ingress import fakes
from tests.ingress.conftest import default_slots, ingress_state, shipped_args
from tests.loopback import LoopbackServer
from tests.seed_examples import examples

IMAGE_EXAMPLES = [e for e in examples("000") if "/v1/images/generations" in e.command]


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(out, format="PNG")
    return out.getvalue()


def _generate(params, model=None) -> GeneratedImages:
    return GeneratedImages(model=model or "unknown", images=[_png(params.width, params.height)], seeds=[7])


class IngressOnLoopback(LoopbackServer):
    name = "ingress"

    def __init__(self, app):
        self.app = app
        super().__init__()

    def _app(self):
        return self.app


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    slots = default_slots()
    slots["image"] = fakes.FakeClient(generate=_generate)
    config = GraphArgs.from_args(shipped_args(cache_dir=str(tmp_path_factory.mktemp("cache"))), environ={})
    server = IngressOnLoopback(create_app(ingress_state(config, slots))).start()
    yield server, slots["image"], config
    server.stop()


def test_the_readme_has_its_three_image_examples():
    assert len(IMAGE_EXAMPLES) == 3


@pytest.mark.parametrize("example", IMAGE_EXAMPLES, ids=["txt2img-512", "txt2img-1024", "img2img-512"])
def test_image_example_runs_verbatim(example, served, tmp_path):
    server, image_slot, config = served
    reference = _png(512, 512)
    (tmp_path / "reference.png").write_bytes(reference)
    image_slot.calls.clear()
    done = subprocess.run(
        ["bash", "-c", example.against(server.url) + " -s -w '\\nHTTP_STATUS %{http_code}'"],
        cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    body, _, status = done.stdout.rpartition("\nHTTP_STATUS ")
    assert status == "200", (example.command, done.stdout[-2000:], done.stderr[-2000:])
    [(method, (params,), model)] = image_slot.calls
    size = next(s for s in ("512x512", "1024x1024") if s in example.command)
    assert method == "generate" and f"{params.width}x{params.height}" == size
    # OminiX-API's short names ("flux", "zimage") name the slot's default when their model is
    # not one this graph serves: the built-in answers (docs/compatibility.md).
    assert model is None
    assert (params.init_image == reference) == ("reference.png" in example.command)
    answer = json.loads(body)
    image = Image.open(io.BytesIO(base64.b64decode(answer["data"][0]["b64_json"])))
    assert f"{image.width}x{image.height}" == size
