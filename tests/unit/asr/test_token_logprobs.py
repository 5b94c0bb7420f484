"""Each text token's log-probability (OpenAI's include=["logprobs"], deployments/asr/token_logprobs.py):
recorded by the same greedy decoding mlx-audio runs, handed to the segments they belong to, in
OpenAI's shape; on real Whisper, clear speech is decoded with confidence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deployments.asr.engine import ASREngine, EngineConfig, TranscribeOptions
from deployments.asr.token_logprobs import decode_with_logprobs, segment_logprobs
from deployments.protocol.logprobs import byte_level_table
from tests.speech import silence, speak

SPEECH = "Please send the quarterly report to the finance team."


@pytest.fixture(scope="module")
async def whisper(cache_dir):
    """Real Whisper tiny.en: the random tiny model's log-probabilities are NaN."""
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en

    engine = await ASREngine.start(WHISPER_TINY_EN_ID, ensure_whisper_tiny_en(cache_dir), EngineConfig())
    yield engine
    engine.shutdown()


def test_segments_claim_their_own_tokens_in_order():
    is_text = lambda token: token < 100  # noqa: E731  (100 and above: timestamps here)
    tokens = [100, 5, 6, 101, 101, 7, 102, 102, 8, 9, 103]
    logprobs = [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8, -0.9, -1.0, -1.1]
    # the middle segment ([7], blank text) was dropped: its token is left unclaimed
    assert segment_logprobs(tokens, logprobs, is_text, [[5, 6], [8, 9]]) == [[-0.2, -0.3], [-0.9, -1.0]]
    assert segment_logprobs(tokens, logprobs, is_text, [[5, 6], [42]]) == [[-0.2, -0.3], []]


def test_the_byte_alphabet_is_gpt2s():
    decoder = byte_level_table()
    assert len(decoder) == 256 and sorted(decoder.values()) == list(range(256))
    assert (decoder["Ġ"], decoder["!"], decoder["Ċ"]) == (32, 33, 10)


@pytest.mark.slow
async def test_the_recorded_steps_sum_to_the_decoders_own_total(whisper):
    """mlx-audio keeps the sum (avg_logprob * (tokens + 1), the end of text included): the steps
    recorded beside it add up to it, so each is the log-probability of the token it chose."""
    import mlx.core as mx
    from mlx_audio.stt.models.whisper.decoding import DecodingOptions, DecodingTask

    from deployments.asr.token_logprobs import _recording_decoder_class

    model = whisper._model
    audio = np.concatenate([speak("Hello world."), silence(0.5)])
    mels = mx.stack([whisper._mel(audio), whisper._mel(speak(SPEECH))])
    options = DecodingOptions(language="en", without_timestamps=False, fp16=False)
    task = DecodingTask(model, options)
    task.decoder = _recording_decoder_class()(0.0, task.tokenizer.eot)
    results = task.run(mels)
    steps = np.array(mx.stack(task.decoder.steps, axis=1), dtype=np.float64)
    for row, result in enumerate(results):
        n = len(result.tokens) + 1
        assert steps[row, :n].sum() == pytest.approx(result.avg_logprob * n, rel=1e-4, abs=1e-3)
    plain = model.decode(mels, options)
    assert [r.tokens for r in results] == [r.tokens for r in plain]  # recording changes nothing
    decoded, logprobs = decode_with_logprobs(model, mels, options)  # each sampled token's, in order
    assert [r.tokens for r in decoded] == [r.tokens for r in plain]
    for row, result in enumerate(decoded):
        assert logprobs[row] == pytest.approx(steps[row, : len(result.tokens)].tolist(), abs=1e-5)


@pytest.mark.slow
async def test_each_segment_carries_its_tokens_logprobs_and_bytes(whisper):
    audio = np.concatenate([speak("A longer sentence about the weather."), silence(1.5), speak("And another.")])
    (plain,) = await whisper.transcribe([audio], TranscribeOptions())
    (timed,) = await whisper.transcribe([audio], TranscribeOptions(logprobs=True))
    assert [s.tokens for s in timed.segments] == [s.tokens for s in plain.segments] and timed.segments
    for segment in timed.segments:
        assert len(segment.logprobs) == len(segment.tokens)
        assert all(e["logprob"] <= 0 and math.isfinite(e["logprob"]) for e in segment.logprobs)
        text = b"".join(bytes(e["bytes"]) for e in segment.logprobs).decode("utf-8", "replace")
        assert text.strip() == segment.text
    assert timed.logprobs() == [e for s in timed.segments for e in s.logprobs]
    assert plain.segments[0].logprobs is None


@pytest.mark.slow
def test_a_model_other_than_whisper_is_a_400_naming_include(whisper, monkeypatch):
    from deployments.protocol.errors import APIError

    whisper.check_options(TranscribeOptions(logprobs=True))
    monkeypatch.setattr(whisper, "model_type", "parakeet")
    with pytest.raises(APIError) as info:
        whisper.check_options(TranscribeOptions(logprobs=True))
    assert info.value.status_code == 400 and info.value.param == "include"


@pytest.mark.slow
async def test_whisper_is_confident_of_clear_speech(whisper):
    (t,) = await whisper.transcribe([speak(SPEECH)], TranscribeOptions(logprobs=True))
    entries = t.logprobs()
    assert "".join(e["token"] for e in entries).strip() == t.text and "quarterly" in t.text.lower()
    assert np.mean([math.exp(e["logprob"]) for e in entries]) > 0.5, entries
