"""The ASR engine with the tiny random whisper: batched decoding equals one-at-a-time decoding,
VAD windows map back to the input's time line, options are checked."""

from __future__ import annotations

import numpy as np
import pytest

from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions
from deployments.protocol.errors import APIError
from tests.speech import silence, speak


@pytest.fixture(scope="module")
async def tiny_engine(cache_dir):
    from deployments.asr.tiny_model import ensure_tiny_whisper

    engine = await ASREngine.start("ominix-tiny-whisper", ensure_tiny_whisper(cache_dir), EngineConfig())
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def utterances():
    return [
        speak("Hello world."),
        np.concatenate([speak("A longer sentence about the weather today."), silence(1.5), speak("And another.")]),
        speak("Yes."),
    ]


async def test_batched_transcripts_equal_single_ones_for_mixed_lengths(tiny_engine, utterances):
    options = TranscribeOptions()
    before = dict(tiny_engine.stats)
    batched = await tiny_engine.transcribe(utterances, options)
    passes = tiny_engine.stats["forward_passes"] - before["forward_passes"]
    assert passes == 1 and tiny_engine.stats["largest_pass"] >= len(utterances)  # one pass, all windows
    singles = [(await tiny_engine.transcribe([u], options))[0] for u in utterances]
    assert [t.text for t in batched] == [t.text for t in singles]
    assert [[s.tokens for s in t.segments] for t in batched] == [[s.tokens for s in t.segments] for t in singles]
    assert [t.duration for t in batched] == pytest.approx([len(u) / 16000 for u in utterances], abs=1e-3)


async def test_segments_stay_inside_the_audio(tiny_engine, utterances):
    (t,) = await tiny_engine.transcribe([utterances[1]], TranscribeOptions())
    assert t.segments, "the random model still emits tokens"
    for s in t.segments:
        assert 0.0 <= s.start <= s.end <= t.duration + 0.01


async def test_silence_gives_an_empty_transcript(tiny_engine):
    (t,) = await tiny_engine.transcribe([silence(2.0)], TranscribeOptions())
    assert t.text == "" and t.segments == [] and t.duration == 2.0


async def test_english_only_model_rejects_other_languages(tiny_engine):
    tiny_engine.check_options(TranscribeOptions(language="en"))
    with pytest.raises(APIError) as info:
        tiny_engine.check_options(TranscribeOptions(language="fr"))
    assert info.value.status_code == 400 and info.value.param == "language"


async def test_word_timestamps_come_with_words(tiny_engine, utterances):
    (t,) = await tiny_engine.transcribe([utterances[0]], TranscribeOptions(word_timestamps=True))
    assert t.words() and all(w.start <= w.end for w in t.words())


def test_batches_split_by_model_and_options():
    from deployments.asr.engine import group_by_options

    en, fr = TranscribeOptions(language="en"), TranscribeOptions(language="fr")
    prompted, words = TranscribeOptions(language="en", prompt="Ominix"), TranscribeOptions(word_timestamps=True)
    keys = [
        ("m", en),
        ("m", fr),
        ("m", en),
        ("m", prompted),
        ("other", en),
        ("m", words),
        ("m", TranscribeOptions(language="en")),
    ]
    assert group_by_options(keys) == [[0, 2, 6], [1], [3], [4], [5]]


def test_is_a_slot_engine_and_healthy(tiny_engine):
    from deployments.engine_thread import SlotEngine

    assert isinstance(tiny_engine, SlotEngine)
    tiny_engine.check_health()
    assert not tiny_engine.closed and tiny_engine.pending() == 0


async def test_window_stream_gives_the_segments_of_transcribe(tiny_engine):
    """Long audio (several 30 s windows): streamed window by window, the same segments and text."""
    long = np.concatenate([speak("A longer sentence about the weather today."), silence(1.0)] * 14)
    (whole,) = await tiny_engine.transcribe([long], TranscribeOptions())
    before = dict(tiny_engine.stats)
    streamed = [segments async for segments in tiny_engine.transcribe_windows(long, TranscribeOptions())]
    windows = tiny_engine.stats["windows"] - before["windows"]
    assert windows >= 2 and tiny_engine.stats["forward_passes"] - before["forward_passes"] == windows  # one by one
    flat = [s for part in streamed for s in part]
    assert [s.tokens for s in flat] == [s.tokens for s in whole.segments]
    assert " ".join(s.text.strip() for s in flat if s.text.strip()) == whole.text


async def test_english_only_model_cannot_translate(tiny_engine):
    with pytest.raises(APIError) as info:
        tiny_engine.check_options(TranscribeOptions(task="translate"))
    assert info.value.status_code == 400 and "English-only" in info.value.message


def test_hypothesis_contexts_follow_the_audio():
    from deployments.asr.hypothesis import FULL_FRAMES, context_frames, token_cap

    assert context_frames(16000) == 500  # 1 s: the 5 s minimum context
    assert context_frames(10 * 16000) == 1100  # 10 s + the 1 s margin
    assert context_frames(29_500 * 16) == FULL_FRAMES == context_frames(40 * 16000)
    assert all(context_frames(n) % 2 == 0 for n in range(0, 16000 * 30, 777))
    assert token_cap(0) == 8 and token_cap(16000 * 5) == 38


async def test_the_short_encoder_is_the_encoder_at_full_length(tiny_engine):
    import mlx.core as mx

    from deployments.asr.hypothesis import encode

    model = tiny_engine._model
    mel = tiny_engine._mel(speak("Hello world."))[None]
    assert mx.allclose(encode(model, mel), model.encoder(mel), atol=1e-5).item()
    short = encode(model, mel[:, :600])
    assert short.shape == (1, 300, model.dims.n_audio_state)


async def test_a_hypothesis_takes_the_fast_path(tiny_engine):
    before = tiny_engine.stats["hypotheses"], tiny_engine.stats["forward_passes"]
    text = await tiny_engine.hypothesis(speak("A longer sentence about the weather today."), TranscribeOptions())
    assert isinstance(text, str)
    assert tiny_engine.stats["hypotheses"] == before[0] + 1 and tiny_engine.stats["forward_passes"] == before[1]


def test_a_looping_hypothesis_keeps_one_copy():
    from deployments.asr.hypothesis import collapse_repeats

    looped = "Hello World, this is the first sentence and it's the first sentence and it's the first sentence and it's"
    assert collapse_repeats(looped) == "Hello World, this is the first sentence and it's"
    assert collapse_repeats("The quick. The quick. The quick. The quick") == "The quick."
    assert collapse_repeats("no no, not that one") == "no no, not that one"  # one word twice is speech
    assert collapse_repeats("") == ""


async def test_silero_can_cut_the_windows(cache_dir, utterances):
    from deployments.asr.tiny_model import ensure_tiny_whisper

    energy = await ASREngine.start("tiny", ensure_tiny_whisper(cache_dir), EngineConfig())
    silero = await ASREngine.start("tiny", ensure_tiny_whisper(cache_dir), EngineConfig(vad="silero"))
    try:
        audio = utterances[1]  # two sentences and a 1.5 s pause
        for engine in (energy, silero):
            chunks = engine._split(audio)
            assert chunks and all(0 <= c.start < c.end <= len(audio) for c in chunks)
        speech = [(c.start, c.end) for c in silero._split(np.concatenate([silence(2.0), audio]))]
        assert speech[0][0] > 1.5 * 16000  # the leading silence is not speech
        (t,) = await silero.transcribe([audio], TranscribeOptions())
        assert t.duration == pytest.approx(len(audio) / 16000, abs=1e-3)
    finally:
        energy.shutdown()
        silero.shutdown()
