"""Voice training's conditioning on the tiny pocket_tts: computed once by the model's reference
encoder, cached as a .safetensors voice, it gives the same audio as cloning from the reference."""

import numpy as np
from safetensors.numpy import save

from deployments.tts.engine import SpeechJob
from deployments.tts.sentences import split_sentences
from tests.unit.tts.test_engine import engine, tiny_tts  # noqa: F401 (fixtures)

TEXT = "Hello world. This is a trained voice."


async def _speak(engine, **job):  # noqa: F811
    return np.concatenate([c async for c in engine.synthesize(SpeechJob(segments=split_sentences(TEXT), **job))])


async def test_cached_conditioning_speaks_as_the_reference(engine, tmp_path):  # noqa: F811
    t = np.arange(2 * 24000) / 24000
    ref = (0.4 * np.sin(2 * np.pi * 180 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    conditioning = await engine.voice_conditioning(ref)
    assert conditioning.dtype == np.float32 and conditioning.ndim == 3 and conditioning.shape[0] == 1
    cached = tmp_path / "voice.pocket_tts.safetensors"
    cached.write_bytes(save({"audio_prompt": conditioning}))
    trained = await _speak(engine, conditioning=cached)
    assert np.array_equal(trained, await _speak(engine, ref_audio=ref))
    assert not np.array_equal(trained[:1000], (await _speak(engine, preset="alba"))[:1000])
