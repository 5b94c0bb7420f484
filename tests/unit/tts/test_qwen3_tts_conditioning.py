"""Voice training's x-vector path on a tiny random Qwen3-TTS Base (tests/tiny_qwen3_tts.py),
without Ray: the conditioning computed once is mlx-audio's own x-vector and reference codes of the
clip, and speaking from the cache gives the same audio as cloning from the clip (greedy decoding)
in both of Qwen3-TTS's cloning modes, without running the speaker encoder or the speech
tokenizer's encoder again. CustomVoice / VoiceDesign models refuse training, saying why."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save

from deployments.protocol.errors import APIError
from deployments.tts import model_hooks
from deployments.tts.engine import TTSEngine
from tests.tiny_qwen3_tts import ensure_tiny_qwen3_tts
from tests.unit.tts.test_voice_conditioning import reference, speak


@pytest.fixture(scope="module")
async def qwen3(cache_dir):
    engine = await TTSEngine.start("tiny-qwen3", ensure_tiny_qwen3_tts(cache_dir), streaming_interval_s=0.08)
    yield engine
    engine.shutdown()


@pytest.fixture
def encoders(monkeypatch):
    """How often the speaker encoder and the speech tokenizer's encoder run (on any thread)."""
    from mlx_audio.tts.models.qwen3_tts.speaker_encoder import Qwen3TTSSpeakerEncoder
    from mlx_audio.tts.models.qwen3_tts.speech_tokenizer import Qwen3TTSSpeechTokenizer

    calls = {"x_vector": 0, "codes": 0}

    def counting(cls, method, key):
        original = getattr(cls, method)

        def counted(self, *args, **kwargs):
            calls[key] += 1
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, method, counted)

    counting(Qwen3TTSSpeakerEncoder, "__call__", "x_vector")
    counting(Qwen3TTSSpeechTokenizer, "encode", "codes")
    return calls


async def test_tiny_qwen3_tts_is_a_base_model_that_clones(qwen3, tmp_path):
    again = ensure_tiny_qwen3_tts(tmp_path)  # deterministic: every replica builds the same files
    for name in ("model.safetensors", "speech_tokenizer/model.safetensors", "tokenizer.json"):
        assert (again / name).read_bytes() == (qwen3.model_dir / name).read_bytes(), name
    assert (qwen3.model_type, qwen3.sample_rate, qwen3.presets) == ("qwen3_tts", 24000, [])
    assert qwen3.capabilities.clone and qwen3.capabilities.ref_text and qwen3.training_unsupported is None
    assert qwen3._model.speech_tokenizer.has_encoder  # both cloning modes are there


async def test_the_cached_conditioning_is_mlx_audios_x_vector_and_codes_of_the_clip(qwen3):
    import mlx.core as mx

    ref = reference(1.5)
    conditioning = await qwen3.voice_conditioning(ref)
    x_vector, codes = conditioning["x_vector"], conditioning["ref_codes"]
    model = qwen3._model  # the engine thread is idle between jobs
    assert x_vector.shape == (1, 16) and x_vector.dtype == np.float32
    assert np.array_equal(x_vector, np.array(model.extract_speaker_embedding(mx.array(ref))))
    assert codes.shape == (1, 16, round(1.5 * 12.5))
    assert np.array_equal(codes, np.array(model.speech_tokenizer.encode(mx.array(ref)[None, None, :])))
    other = await qwen3.voice_conditioning(reference(1.5, pitch=320.0))
    assert not np.allclose(other["x_vector"], x_vector)  # it is the clip's, not a constant


async def test_speaking_from_the_cache_equals_cloning_from_the_clip(qwen3, tmp_path, encoders):
    transcript = "hello world"
    clips = {"low": reference(1.5), "high": reference(1.5, pitch=320.0)}
    cached = {}
    for name, clip in clips.items():
        cached[name] = tmp_path / f"{name}.qwen3_tts.safetensors"
        cached[name].write_bytes(save(await qwen3.voice_conditioning(clip)))
    encoders.update(x_vector=0, codes=0)
    # Without a transcript the x-vector alone; with one, the in-context mode (x-vector + codes).
    # Two voices in turn: nothing of one (mlx-audio's per-clip code cache) may answer for the other.
    trained = {
        (name, text): await speak(qwen3, conditioning=path, ref_text=text)
        for name, path in cached.items()
        for text in (None, transcript)
    }
    assert encoders == {"x_vector": 0, "codes": 0}  # nothing re-encoded
    for (name, text), audio in trained.items():
        cloned = await speak(qwen3, ref_audio=clips[name], ref_text=text)
        assert audio.size and np.array_equal(audio, cloned), (name, text)
    assert encoders["x_vector"] > 0 and encoders["codes"] > 0  # cloning from the clip encodes it
    assert not np.array_equal(trained["low", None], trained["high", None])  # the cached x-vector speaks
    assert not np.array_equal(trained["low", None], trained["low", transcript])  # and the cached codes
    assert "extract_speaker_embedding" not in vars(qwen3._model)  # the model's own method is back


@pytest.mark.parametrize("kind", ["custom_voice", "voice_design"])
def test_qwen3_tts_without_a_speaker_encoder_refuses_training_saying_why(kind):
    model = SimpleNamespace(speaker_encoder=None, config=SimpleNamespace(tts_model_type=kind))
    why = model_hooks.training_unsupported(model, "qwen3_tts")
    assert why and kind in why and "speaker encoder" in why and "Base" in why
    assert model_hooks.training_unsupported(SimpleNamespace(speaker_encoder=object()), "qwen3_tts") is None
    engine = TTSEngine("qwen3-custom", Path("."))
    engine.model_type, engine.training_unsupported = "qwen3_tts", why
    with pytest.raises(APIError) as e:
        engine._conditioning(np.zeros(24000, dtype=np.float32))
    assert (e.value.status_code, e.value.code) == (400, "training_unsupported") and why in str(e.value.message)


async def test_the_tts_slot_trains_and_speaks_a_qwen3_voice_by_name(qwen3, tmp_path):
    """The slot's half of the pipeline without Ray (no control plane: the registry file): the
    conditioning stored as <name>.qwen3_tts.safetensors, registered, and a request naming the
    voice spoken from it, in context with the voice's transcript, as cloning from the clip."""
    from deployments.protocol.speech import SynthesisParams
    from deployments.tts.config import TTSSlotConfig
    from deployments.tts.deployment import TTSSlot
    from deployments.voices.library import VoiceLibrary

    slot = object.__new__(TTSSlot.func_or_class)
    slot.config = TTSSlotConfig(default_model="tiny-qwen3")
    slot.library = VoiceLibrary(tmp_path / "voices.json")  # no control plane: the registry file

    async def engine():
        return qwen3

    slot.engine = engine
    assert (await slot.describe())["training_unsupported"] is None
    ref, transcript = reference(1.5), "hello world"
    files = await slot.cache_conditioning("narrator", ref.astype("<f4").tobytes())
    assert (
        files["conditioning"].endswith("narrator.qwen3_tts.safetensors") and files["conditioning_model"] == "tiny-qwen3"
    )
    await slot.register_trained_voice("narrator", files, transcript)
    chosen, job = await slot._job(
        qwen3, SynthesisParams(text="Hello world. This is a trained voice.", voice="narrator")
    )
    assert chosen is qwen3 and job.ref_audio is None and job.ref_text == transcript
    trained = np.concatenate([c async for c in qwen3.synthesize(job)])
    assert np.array_equal(trained, await speak(qwen3, ref_audio=ref, ref_text=transcript))
