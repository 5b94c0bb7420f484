"""The per-model slot metrics (Ray-free here: only the JSON totals are kept)."""

from deployments.asr.metrics import TranscriptionMetrics
from deployments.llm.metrics import GenerationMetrics
from deployments.tts.metrics import SpeechMetrics


def test_llm_summary_keeps_its_shape():
    m = GenerationMetrics()
    m.first_token("m", 0.05)
    m.finished("m", prompt_tokens=7, completion_tokens=5, decode_seconds=0.4)
    s = m.summary("m")
    assert s["requests"] == 1 and s["prompt_tokens"] == 7 and s["completion_tokens"] == 5
    assert s["ttft_count"] == 1 and s["ttft_ms_mean"] == 50
    assert s["itl_ms_mean"] == 100  # 400 ms over the 4 tokens after the first
    assert m.summary("other") == {}


def test_asr_counts_audio_seconds_per_model():
    m = TranscriptionMetrics()
    m.transcribed("a", 2.5, 0.2)
    m.transcribed("a", 1.5, 0.4)
    m.transcribed("b", 1.0, 0.1)
    a = m.summaries()["a"]
    assert a["requests"] == 2 and a["audio_seconds"] == 4.0
    assert a["latency_count"] == 2 and abs(a["latency_ms_mean"] - 300) < 1e-9 and abs(a["latency_ms_max"] - 400) < 1e-9
    assert m.summaries()["b"]["audio_seconds"] == 1.0


def test_tts_meter_times_the_first_audio_and_counts_what_was_produced():
    m = SpeechMetrics()
    meter = m.meter("t", characters=12, sample_rate=100, started=0.0)
    meter.audio(0)  # an empty chunk is not the first audio
    assert "ttfa_count" not in m.summary("t")
    meter.audio(150)
    meter.audio(50)
    meter.done()
    s = m.summary("t")
    assert s["audio_seconds"] == 2.0 and s["characters"] == 12 and s["requests"] == 1
    assert s["ttfa_count"] == 1 and s["ttfa_ms_mean"] > 0


def test_a_synthesis_without_audio_counts_no_first_audio():
    m = SpeechMetrics()
    m.meter("t", characters=3, sample_rate=24000, started=0.0).done()
    s = m.summary("t")
    assert s["requests"] == 1 and s["audio_seconds"] == 0 and "ttfa_count" not in s


def test_image_metrics_count_generations_images_and_steps():
    from deployments.image.metrics import ImageMetrics

    m = ImageMetrics()
    m.generated("img", images=2, steps=4, seconds=1.5)
    m.generated("img", images=1, steps=4, seconds=0.5)
    s = m.summary("img")
    assert s["requests"] == 2 and s["images"] == 3 and s["steps"] == 12
    assert s["latency_count"] == 2 and s["latency_ms_mean"] == 1000
