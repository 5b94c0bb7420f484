"""The TTS engine on the built-in tiny pocket_tts, without Ray: loading through mlx-audio,
presets, capabilities, streaming, per-job voices, option checks."""

import asyncio

import numpy as np
import pytest

from deployments.protocol.errors import APIError
from deployments.tts.engine import SpeechJob, TTSEngine, find_presets
from deployments.tts.sentences import split_sentences
from deployments.tts.tiny_model import TINY_TTS_VOICES, ensure_tiny_tts, tiny_tts_dir

TEXT = "Hello world. This is a test of the speech server! It streams sentence by sentence."


@pytest.fixture(scope="module")
def tiny_tts(cache_dir):
    return ensure_tiny_tts(cache_dir)


@pytest.fixture(scope="module")
async def engine(tiny_tts):
    engine = await TTSEngine.start("tiny", tiny_tts, streaming_interval_s=0.08)
    yield engine
    engine.shutdown()


async def collect(engine, **job):
    return [c async for c in engine.synthesize(SpeechJob(segments=split_sentences(TEXT), **job))]


def test_tiny_model_is_generated_once_and_deterministically(tiny_tts, tmp_path):
    assert sorted(p.name for p in (tiny_tts / "voices").iterdir()) == [f"{v}.safetensors" for v in TINY_TTS_VOICES]
    assert ensure_tiny_tts(tiny_tts.parent) == tiny_tts == tiny_tts_dir(tiny_tts.parent)
    other = ensure_tiny_tts(tmp_path)
    assert (other / "model.safetensors").read_bytes() == (tiny_tts / "model.safetensors").read_bytes()
    assert find_presets(tiny_tts) == list(TINY_TTS_VOICES)


async def test_engine_facts(engine):
    assert (engine.sample_rate, engine.model_type, engine.presets) == (24000, "pocket_tts", list(TINY_TTS_VOICES))
    caps = engine.capabilities
    assert caps.stream and caps.clone and not caps.speed and not caps.instruct
    assert engine.default_preset is None and engine.preset_aliases == {}  # its first preset, no aliases


async def test_streams_chunks_per_voice(engine):
    alba = await collect(engine, preset="alba")
    assert len(alba) > 1 and all(c.dtype == np.float32 and c.ndim == 1 for c in alba)
    again = await collect(engine, preset="alba")
    assert np.array_equal(np.concatenate(alba), np.concatenate(again))
    marius = np.concatenate(await collect(engine, preset="marius"))
    assert not np.array_equal(np.concatenate(alba)[: marius.size], marius[: len(np.concatenate(alba))])


async def test_clone_reference_is_per_job(engine):
    t = np.arange(24000) / 24000
    ref = (0.4 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    cloned = np.concatenate(await collect(engine, ref_audio=ref))
    preset = np.concatenate(await collect(engine, preset="alba"))
    assert cloned.size and not np.array_equal(cloned[: preset.size], preset[: cloned.size])
    # The preset afterwards is unaffected by the earlier clone: nothing is cached.
    assert np.array_equal(np.concatenate(await collect(engine, preset="alba")), preset)


async def test_options_the_model_cannot_honour(engine):
    with pytest.raises(APIError, match="speed"):
        engine.check_job(SpeechJob(segments=[], speed=2.0))
    with pytest.raises(APIError, match="instruct"):
        engine.check_job(SpeechJob(segments=[], instruct="calm"))
    engine.check_job(SpeechJob(segments=[], speed=1.0, language="en"))


async def test_failure_is_an_error_not_a_dead_thread(engine):
    with pytest.raises(APIError, match="synthesis failed"):
        await collect(engine, ref_audio=np.zeros((2, 2, 2), np.float32))  # not mono audio
    assert not engine.thread_died()
    assert await collect(engine, preset="alba")


async def test_closing_early_stops_the_job(engine):
    gen = engine.synthesize(SpeechJob(segments=split_sentences(TEXT * 5), preset="alba"))
    await gen.__anext__()
    await gen.aclose()
    assert await collect(engine, preset="marius")  # the engine moved on


async def test_a_slow_consumer_gets_the_same_audio_in_fewer_chunks(engine):
    fast = await collect(engine, preset="alba")
    chunks_before = engine.stats.chunks
    slow = []
    async for chunk in engine.synthesize(SpeechJob(segments=split_sentences(TEXT), preset="alba")):
        slow.append(chunk)
        while engine.stats.chunks - chunks_before < len(fast):  # the engine runs ahead to the end
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)  # its last chunk is counted just before it is sent
    assert len(slow) == 2 < len(fast)  # the first chunk, then everything else merged into one
    assert np.array_equal(np.concatenate(slow), np.concatenate(fast))


def test_is_a_slot_engine_and_healthy(engine):
    from deployments.engine_thread import SlotEngine

    assert isinstance(engine, SlotEngine)
    engine.check_health()
    assert not engine.closed and engine.pending() == 0
