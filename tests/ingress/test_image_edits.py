"""POST /v1/images/edits in process, fake image slot: OpenAI's multipart edit becomes img2img of
the uploaded image with the form's fields (strings coerced), and what img2img cannot do (a
mask, several images, a stream) is a 400 naming the field, the slot never called."""

from __future__ import annotations

import pytest

from deployments.protocol.images import GeneratedImages

PNG = b"\x89PNG\r\n\x1a\n-an-image"


@pytest.fixture
def calls(slots):
    seen = []

    def generate(params, model=None):
        seen.append(params)
        return GeneratedImages(
            model="ominix-tiny-flux2-klein",
            images=[b"\x89PNG-out"] * params.n,
            seeds=list(range(params.n)),
            output_format="png",
        )

    slots["image"].answers["generate"] = generate
    return seen


async def test_an_edit_is_img2img_of_the_upload(http, calls):
    form = {"prompt": "make it blue", "n": "2", "size": "64x32", "strength": "0.4", "seed": "9", "steps": "3"}
    r = await http.post("/v1/images/edits", data=form, files={"image": ("in.png", PNG, "image/png")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["data"]) == 2 and body["data"][0]["revised_prompt"] == "make it blue" and body["size"] == "64x32"
    [params] = calls
    assert params.init_image == PNG and params.strength == 0.4 and params.n == 2 and params.seed == 9
    assert (params.width, params.height, params.steps) == (64, 32, 3)
    r = await http.post("/v1/images/edits", data={"prompt": "again"}, files={"image[]": ("in.png", PNG, "image/png")})
    assert r.status_code == 200 and calls[-1].strength == 0.75  # the SDK's list form; img2img's default strength


@pytest.mark.parametrize(
    "data, files, param",
    [
        ({"prompt": "x"}, {"image": ("a.png", PNG), "mask": ("m.png", PNG)}, "mask"),
        ({"prompt": "x", "stream": "true"}, {"image": ("a.png", PNG)}, "stream"),
        ({"prompt": "x"}, [("image[]", ("a.png", PNG)), ("image[]", ("b.png", PNG))], "image"),
        ({"prompt": "x", "image": "not a file"}, None, "image"),
        ({"prompt": "x", "n": "eleven"}, {"image": ("a.png", PNG)}, "n"),
        ({"prompt": "x", "strength": "2"}, {"image": ("a.png", PNG)}, "strength"),
        ({"prompt": " "}, {"image": ("a.png", PNG)}, "prompt"),
        ({"prompt": "x", "response_format": "url"}, {"image": ("a.png", PNG)}, "response_format"),
    ],
)
async def test_what_an_edit_cannot_be_is_a_400_naming_it(http, calls, data, files, param):
    r = await http.post("/v1/images/edits", data=data, files=files)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and not calls
