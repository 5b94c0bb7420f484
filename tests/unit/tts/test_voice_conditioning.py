"""Voice training's conditioning on the tiny pocket_tts: computed once by the model's reference
encoder, cached as a .safetensors voice, it gives the same audio as cloning from the reference.
`reference` and `speak` serve the other models' conditioning tests (test_qwen3_tts_conditioning)."""

import numpy as np
from safetensors.numpy import save

from deployments.tts.engine import SpeechJob
from deployments.tts.sentences import split_sentences
from tests.unit.tts.test_engine import engine, tiny_tts  # noqa: F401 (fixtures)

TEXT = "Hello world. This is a trained voice."


def reference(seconds: float = 2.0, pitch: float = 180.0) -> np.ndarray:
    """A voiced-like clip: a tone at `pitch` Hz, amplitude-modulated at 3 Hz."""
    t = np.arange(int(seconds * 24000)) / 24000
    return (0.4 * np.sin(2 * np.pi * pitch * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32)


async def speak(engine, text: str = TEXT, **job):  # noqa: F811
    return np.concatenate([c async for c in engine.synthesize(SpeechJob(segments=split_sentences(text), **job))])


async def test_cached_conditioning_speaks_as_the_reference(engine, tmp_path):  # noqa: F811
    ref = reference()
    conditioning = (await engine.voice_conditioning(ref))["audio_prompt"]
    assert conditioning.dtype == np.float32 and conditioning.ndim == 3 and conditioning.shape[0] == 1
    cached = tmp_path / "voice.pocket_tts.safetensors"
    cached.write_bytes(save({"audio_prompt": conditioning}))
    trained = await speak(engine, conditioning=cached)
    assert np.array_equal(trained, await speak(engine, ref_audio=ref))
    assert not np.array_equal(trained[:1000], (await speak(engine, preset="alba"))[:1000])
