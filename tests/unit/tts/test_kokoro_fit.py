"""Kokoro voice fitting (deployments/tts/kokoro_fit.py) in process: the MLX speaker-embedding
front end agrees with the numpy one, a step through Kokoro starts from the nearest stock blend and
gives a pack Kokoro speaks (that the steps raise the similarity is checked end to end:
tests/e2e/test_kokoro_training.py), and the engine fits in a child process that runs beside syntheses and dies when the caller leaves."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from deployments.tts import kokoro
from deployments.tts.engine import SpeechJob, StyleFitJob, TTSEngine
from tests.speech import speak

RATE = 24000
# Three stock voices of both genders and accents: enough for a blend, quick to score (each is a
# synthesis and an embedding, seconds of CPU; the e2e training job scores six).
VOICES = ("af_heart", "am_adam", "bm_george")


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """A voice no stock Kokoro voice has: espeak-ng's, at Kokoro's rate."""
    return speak("I would like to book a table for two people at eight tonight, please.", RATE, "en-us+m3")


@pytest.fixture(scope="session")
def kokoro_dir(cache_dir):
    return kokoro.ensure_kokoro(cache_dir)


def test_the_mlx_front_end_embeds_as_the_numpy_one(reference):
    import mlx.core as mx

    from deployments.audio_models.speaker_encoder import default_encoder
    from deployments.similarity import cosine
    from deployments.tts.kokoro_fit import _front, embed_mx

    encoder = default_encoder()
    ours = np.array(embed_mx(encoder, _front(), mx.array(reference)))
    assert cosine(ours, encoder.embed_utterance(reference, RATE)) > 0.999
    # and it tells voices apart as the numpy path does: not a constant
    other = speak("I would like to book a table for two people at eight tonight, please.", RATE, "en-us+f4")
    assert cosine(ours, np.array(embed_mx(encoder, _front(), mx.array(other)))) < 0.95


@pytest.fixture(scope="module")
def fitted(kokoro_dir, reference):
    """A fit over the stock voices above, one step: what the fit's pack and bookkeeping are. That
    the steps raise the similarity (three steps, the fewest in which the loss falls here) is
    checked once, end to end, through the graph's training job (tests/e2e/test_kokoro_training.py):
    a step is ~40 s of CPU, and the same fit ran in both halves of `make test`."""
    from mlx_audio.tts.utils import load_model

    from deployments.audio_models.speaker_encoder import default_encoder
    from deployments.tts import model_hooks
    from deployments.tts.kokoro_fit import KokoroVoiceFit, load_packs

    model_hooks.before_load(kokoro_dir)
    model = load_model(kokoro_dir)
    packs = {k: v for k, v in load_packs(kokoro_dir / "voices").items() if k in VOICES}
    fit = KokoroVoiceFit(model, default_encoder(), packs, reference)
    nearest = fit.start()
    start = fit.similarity()
    losses = [step.loss for step in fit.steps(1)]
    return fit, nearest, start, losses


@pytest.mark.slow
def test_a_step_starts_from_the_nearest_blend_and_gives_a_kokoro_pack(fitted):
    fit, nearest, start, losses = fitted
    assert fit.stock_similarity[nearest] == max(fit.stock_similarity.values())
    assert losses[0] == pytest.approx(1 - start, abs=1e-4)  # the loss is 1 - cosine
    pack = fit.pack()
    assert pack.shape == (510, 1, 256) and pack.dtype == np.float32
    assert float(np.array(fit.blend.weights()).sum()) == pytest.approx(1.0, abs=1e-5)


@pytest.fixture(scope="module")
async def kokoro_engine(kokoro_dir):
    engine = await TTSEngine.start(kokoro.KOKORO_TTS_ID, kokoro_dir)
    yield engine
    engine.shutdown()


@pytest.mark.slow
async def test_a_fitted_pack_is_a_voice_kokoro_speaks_by_path(kokoro_engine, fitted, tmp_path):
    from deployments.tts.deployment import _voice_pack_file

    path = tmp_path / "fitted.kokoro.safetensors"
    path.write_bytes(_voice_pack_file(fitted[0].pack()))
    job = SpeechJob(segments=["Hello there."], conditioning=path)
    audio = np.concatenate([c async for c in kokoro_engine.synthesize(job)])
    assert 0.3 < audio.size / RATE < 5.0 and np.abs(audio).max() > 0.05


def fit_processes() -> list[str]:
    """The fitting children running now (deployments/tts/fit_process.py), from /proc."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):  # a process that ended while we looked
            if b"deployments.tts.fit_process" in cmdline.read_bytes():
                found.append(cmdline.parent.name)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the child process through /proc")
async def test_the_fit_runs_beside_syntheses_and_its_process_dies_when_the_caller_leaves(kokoro_engine, reference):
    events, frozen = [], None
    try:
        # A close that waited for the child (its voice in flight, its ~40 s step, its end) never
        # returns: the child is frozen below. The guard turns that into a failure, not a hang.
        async with asyncio.timeout(60):
            async with contextlib.aclosing(kokoro_engine.fit_style(StyleFitJob(audio=reference, steps=40))) as stream:
                async for event in stream:
                    events.append(event)
                    if len(events) == 1:
                        assert len(fit_processes()) == 1
                        # The engine thread speaks while the child scores the stock voices.
                        job = SpeechJob(segments=["Hello."], preset="af_heart")
                        audio = [c async for c in kokoro_engine.synthesize(job)]
                        assert np.concatenate(audio).size > 0 and len(fit_processes()) == 1
                    if len(events) == 2:
                        # Frozen mid-voice, the child can finish neither its voice nor its step
                        # nor its job, nor read a request to stop: only a signal that kills it
                        # ends it. Gone once the close returns means killed, whatever the load.
                        [frozen] = fit_processes()
                        os.kill(int(frozen), signal.SIGSTOP)
                        break  # the caller leaves (a cancelled training job) while the stock voices are scored
        assert fit_processes() == []
        assert events == [{"scored": 1, "of": 54}, {"scored": 2, "of": 54}]
    finally:
        if frozen is not None and frozen in fit_processes():  # the test failed: leave no frozen child behind
            os.kill(int(frozen), signal.SIGKILL)
