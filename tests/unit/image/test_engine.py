"""The image engine with the built-in tiny FLUX.2-klein (mflux, random weights): PNGs of the
requested size, seeds reproduce images (webp too), img2img uses the image and the strength, progress and
cancellation, options the model cannot honour, mflux quantization."""

from __future__ import annotations

import asyncio
import io

import pytest

from deployments.image.engine import ImageEngine, ImageJob
from deployments.image.tiny_model import TINY_IMAGE_ID
from deployments.protocol.errors import APIError


@pytest.fixture(scope="module")
def tiny_image_dir(cache_dir):
    from deployments.image.tiny_model import ensure_tiny_image

    return ensure_tiny_image(cache_dir)


@pytest.fixture(scope="module")
async def engine(tiny_image_dir):
    engine = await ImageEngine.start(TINY_IMAGE_ID, tiny_image_dir)
    yield engine
    engine.shutdown()


def _pil(data: bytes):
    from PIL import Image

    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def _job(**kw) -> ImageJob:
    return ImageJob(**{"prompt": "a red fox in the snow", "width": 32, "height": 32, "seeds": [1], "steps": 2, **kw})


async def test_png_of_the_requested_size(engine):
    [png] = await engine.generate(_job(width=48, height=32))
    image = _pil(png)
    assert (image.format, image.size, image.mode) == ("PNG", (48, 32), "RGB")
    assert engine.family.name == "flux2-klein" and engine.default_steps() == 4


async def test_same_seed_same_image_other_seed_other_image(engine):
    a, b = await engine.generate(_job(seeds=[5, 6], output_format="webp"))
    [a_again] = await engine.generate(_job(seeds=[5], output_format="webp"))
    assert a == a_again and _pil(a).format == "WEBP"
    assert _pil(a).tobytes() != _pil(b).tobytes()


async def test_img2img_uses_the_image_and_the_strength(engine):
    from PIL import Image

    red, blue = Image.new("RGB", (32, 32), (230, 20, 20)), Image.new("RGB", (40, 40), (20, 20, 230))
    before = engine.stats.steps
    [from_red] = await engine.generate(_job(steps=4, init_image=red, strength=0.5))
    assert engine.stats.steps - before == 2  # strength 0.5 of 4 steps: the last two run
    [from_blue] = await engine.generate(_job(steps=4, init_image=blue, strength=0.5))
    assert _pil(from_red).size == _pil(from_blue).size == (32, 32)
    assert _pil(from_red).tobytes() != _pil(from_blue).tobytes()


async def test_progress_is_reported_and_abandoned_jobs_stop(engine):
    task = asyncio.create_task(engine.generate(_job(steps=60)))
    for _ in range(600):
        progress = engine.progress()
        if progress and progress["step"] >= 1:
            break
        await asyncio.sleep(0.05)
    assert progress["steps"] == 60 and progress["images"] == 1
    cancelled = engine.stats.cancelled
    task.cancel()
    for _ in range(600):
        if engine.stats.cancelled > cancelled and engine.progress() is None:
            break
        await asyncio.sleep(0.05)
    assert engine.stats.cancelled == cancelled + 1 and engine.progress() is None
    [png] = await engine.generate(_job())  # the engine goes on serving
    assert _pil(png).size == (32, 32)


def test_options_the_model_cannot_honour_are_refused(engine):
    with pytest.raises(APIError) as e:
        engine.check_job(_job(negative_prompt="blurry"))
    assert e.value.status_code == 400 and e.value.param == "negative_prompt"


async def test_mflux_quantization_writes_a_loadable_8_bit_copy(tiny_image_dir, tmp_path):
    from deployments.image.pipelines import read_declared, write_quantized

    target = await asyncio.to_thread(write_quantized, TINY_IMAGE_ID, tiny_image_dir, 8, tmp_path / "q8")
    assert read_declared(target)["quantized_bits"] == 8
    quantized = await ImageEngine.start("q8", target)
    try:
        assert quantized.bits == 8
        [png] = await quantized.generate(_job())
        assert _pil(png).size == (32, 32)
    finally:
        quantized.shutdown()


async def test_an_unload_aborts_the_running_generation(tiny_image_dir):
    engine = await ImageEngine.start(TINY_IMAGE_ID, tiny_image_dir)
    task = asyncio.create_task(engine.generate(_job(steps=60)))
    for _ in range(600):
        if (engine.progress() or {}).get("step"):
            break
        await asyncio.sleep(0.05)
    engine.abort_running()
    await asyncio.to_thread(engine.shutdown)
    with pytest.raises(APIError) as e:
        await task
    assert e.value.status_code == 503 and engine.stats.cancelled == 1


def test_is_a_slot_engine_and_healthy(engine):
    from deployments.engine_thread import SlotEngine

    assert isinstance(engine, SlotEngine)
    engine.check_health()
    assert not engine.closed and engine.pending() == 0
