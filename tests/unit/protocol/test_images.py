"""The image request model and the image slot's pure helpers: sizes, bounds, base64, families,
strength, encoding."""

import base64
import io

import pytest
from pydantic import ValidationError

from deployments.image.codec import BadImage, encode_image, open_image
from deployments.image.config import ImageSlotConfig
from deployments.image.families import FLUX2_KLEIN, Z_IMAGE_TURBO, family_of, img2img_keep
from deployments.protocol.images import ImageGenerationRequest, ImageParams, decode_image_base64, parse_size


def test_defaults_follow_ominix_and_openai():
    r = ImageGenerationRequest.model_validate({"prompt": "a fox"})
    assert (r.n, r.size, r.response_format, r.output_format, r.strength) == (1, "512x512", "b64_json", "png", 0.75)
    assert r.dimensions == (512, 512)


@pytest.mark.parametrize("size,expected", [("32x48", (32, 48)), ("1024X512", (1024, 512)), ("auto", (512, 512))])
def test_sizes(size, expected):
    assert ImageGenerationRequest.model_validate({"prompt": "x", "size": size}).dimensions == expected


@pytest.mark.parametrize("size", ["512", "512x", "x512", "20x32", "32x4096", "0x0", "8x8", "512*512", "-32x32", 512])
def test_bad_sizes(size):
    with pytest.raises(ValidationError):
        ImageGenerationRequest.model_validate({"prompt": "x", "size": size})


def test_size_errors_say_why():
    with pytest.raises(ValueError, match="multiple of 16"):
        parse_size("40x40")
    with pytest.raises(ValueError, match="between 16 and 2048"):
        parse_size("4096x16")


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": ""},
        {"prompt": "   "},
        {},
        {"prompt": "x", "n": 0},
        {"prompt": "x", "n": 11},
        {"prompt": "x", "strength": 1.5},
        {"prompt": "x", "strength": -0.1},
        {"prompt": "x", "steps": 0},
        {"prompt": "x", "steps": 101},
        {"prompt": "x", "seed": -1},
        {"prompt": "x", "response_format": "file"},
        {"prompt": "x", "output_format": "gif"},
        {"prompt": "x", "output_compression": 101},
    ],
)
def test_invalid(body):
    with pytest.raises(ValidationError):
        ImageGenerationRequest.model_validate(body)


def test_aliases_and_blanks():
    r = ImageGenerationRequest.model_validate(
        {
            "prompt": "x",
            "num_inference_steps": 3,
            "guidance_scale": 2.5,
            "negative_prompt": " ",
            "output_format": "jpg",
            "quality": "hd",
            "style": "vivid",
        }
    )
    assert (r.steps, r.guidance, r.negative_prompt, r.output_format) == (3, 2.5, None, "jpeg")


def test_params_carry_the_request():
    r = ImageGenerationRequest.model_validate({"prompt": "x", "size": "64x32", "n": 2, "seed": 7, "strength": 0.4})
    p = ImageParams.from_request(r, b"img")
    assert (p.width, p.height, p.n, p.seed, p.strength, p.init_image) == (64, 32, 2, 7, 0.4, b"img")


def test_base64_images():
    assert decode_image_base64(base64.b64encode(b"abc").decode()) == b"abc"
    assert decode_image_base64("data:image/png;base64," + base64.b64encode(b"abc").decode()) == b"abc"
    for bad in ("not base64!", ""):
        with pytest.raises(ValueError):
            decode_image_base64(bad)


def test_families_follow_ominix_name_rule():
    assert family_of("Tongyi-MAI/Z-Image-Turbo") is Z_IMAGE_TURBO
    assert family_of("uqer1244/MLX-zimage") is Z_IMAGE_TURBO
    assert family_of("black-forest-labs/FLUX.2-klein-4B") is FLUX2_KLEIN
    assert family_of("anything-else") is FLUX2_KLEIN
    assert family_of("whatever", "z-image-turbo") is Z_IMAGE_TURBO
    with pytest.raises(ValueError):
        family_of("x", "sdxl")


def test_strength_maps_to_mflux_image_strength():
    # OpenAI/OminiX: 1 repaints everything (start from noise); mflux: share of steps skipped.
    assert img2img_keep(1.0) == 0.0 and img2img_keep(0.0) == 1.0 and img2img_keep(0.75) == pytest.approx(0.25)


def test_aliases_are_case_insensitive():
    config = ImageSlotConfig(aliases={"FLUX": "black-forest-labs/FLUX.2-klein-4B"}, default_model="Flux")
    assert config.aliases == {"flux": "black-forest-labs/FLUX.2-klein-4B"}
    assert config.default_model == "black-forest-labs/FLUX.2-klein-4B"


def test_codec_round_trip_and_bad_images():
    from PIL import Image

    image = Image.new("RGB", (20, 12), (10, 200, 30))
    for fmt, magic in (("png", b"\x89PNG"), ("jpeg", b"\xff\xd8"), ("webp", b"RIFF")):
        data = encode_image(image, fmt, 80)
        assert data.startswith(magic)
        assert open_image(data).size == (20, 12)
    with pytest.raises(BadImage):
        open_image(b"definitely not an image")
    with pytest.raises(BadImage):
        open_image(encode_image(image, "png")[:40])  # truncated
    rgba = io.BytesIO()
    Image.new("RGBA", (4, 4)).save(rgba, format="PNG")
    assert open_image(rgba.getvalue()).mode == "RGB"
