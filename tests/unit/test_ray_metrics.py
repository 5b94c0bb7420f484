"""The graph's figures as Ray metrics (deployments/ray_metrics.py), recorded where the slots
record their JSON totals. Ray is not started here: a fake stands for `ray.serve.metrics`,
created the way `_create` creates the real objects; one test checks nothing is created
while Ray is not initialised."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from deployments import ray_metrics
from deployments.asr.metrics import TranscriptionMetrics
from deployments.llm.metrics import GenerationMetrics
from deployments.metrics import REPLICA_METRICS, LoadedModelsGauge, record_memory
from deployments.tts.metrics import SpeechMetrics
from tests.unit.metrics_catalog import ALL_METRICS


class FakeMetric:
    def __init__(self, spec):
        self.spec = spec
        self.points: list[tuple[float, dict]] = []

    def inc(self, value, tags):
        self._record(value, tags)

    def set(self, value, tags):
        self._record(value, tags)

    def observe(self, value, tags):
        self._record(value, tags)

    def _record(self, value, tags):
        assert set(tags) == set(self.spec.tags), (self.spec.name, tags)  # Ray refuses a missing tag
        self.points.append((value, tags))


@pytest.fixture
def exported(monkeypatch):
    """{metric name: FakeMetric} of what this process exported."""
    monkeypatch.setattr(ray_metrics, "_objects", {})
    monkeypatch.setattr(ray_metrics, "_refused", set())
    monkeypatch.setattr(ray_metrics, "ray_is_initialized", lambda: True)
    monkeypatch.setattr(ray_metrics, "_create", FakeMetric)
    return ray_metrics._objects


def points(exported, name):
    return exported[name].points


def test_nothing_is_created_while_ray_is_not_initialised(monkeypatch):
    monkeypatch.setattr(ray_metrics, "_objects", {})
    assert not ray_metrics.ray_is_initialized()  # unit tests never start Ray
    GenerationMetrics().finished("m", 3, 2, 0.1)
    assert ray_metrics._objects == {}


def test_llm_tokens_latencies_and_prefix_cache_hits_are_exported_per_model(exported):
    m = GenerationMetrics()
    m.first_token("m", 0.05)
    m.finished("m", prompt_tokens=7, completion_tokens=5, decode_seconds=0.4, cached_tokens=4)
    m.finished("m", prompt_tokens=3, completion_tokens=1, decode_seconds=0.0)
    assert points(exported, "ominix_llm_prompt_tokens") == [(7, {"model": "m"}), (3, {"model": "m"})]
    assert points(exported, "ominix_llm_generated_tokens") == [(5, {"model": "m"}), (1, {"model": "m"})]
    assert points(exported, "ominix_llm_prefix_cache_hits") == [(1, {"model": "m"})]
    assert points(exported, "ominix_llm_prefix_cached_tokens") == [(4, {"model": "m"})]
    assert points(exported, "ominix_llm_time_to_first_token_ms") == [(50, {"model": "m"})]
    assert points(exported, "ominix_llm_inter_token_latency_ms") == [(100, {"model": "m"})]
    s = m.summary("m")
    assert s["cache_hits"] == 1 and s["cached_tokens"] == 4 and s["completion_tokens"] == 6


def test_llm_sequence_gauges_keep_the_last_sample(exported):
    m = GenerationMetrics()
    m.sequences({"m": (3, 2), "n": (2, 1)})
    m.sequences({"m": (1, 0)})  # n was unloaded
    last_running = {tags["model"]: v for v, tags in points(exported, "ominix_llm_running_sequences")}
    last_queued = {tags["model"]: v for v, tags in points(exported, "ominix_llm_queued_sequences")}
    assert last_running == {"m": 1, "n": 0} and last_queued == {"m": 0, "n": 0}
    assert m.summary("m")["running_sequences"] == 1


def test_a_counter_never_goes_down_or_records_nothing(exported):
    GenerationMetrics().finished("m", prompt_tokens=0, completion_tokens=0, decode_seconds=0)
    assert "ominix_llm_prompt_tokens" not in exported or points(exported, "ominix_llm_prompt_tokens") == []


def test_asr_real_time_factor_and_live_sessions(exported):
    m = TranscriptionMetrics()
    m.transcribed("a", audio_seconds=4.0, seconds=1.0)
    m.transcribed("a", audio_seconds=0.0, seconds=0.1)  # no audio: no ratio
    assert points(exported, "ominix_asr_real_time_factor") == [(0.25, {"model": "a"})]
    assert sum(v for v, _ in points(exported, "ominix_asr_audio_seconds")) == 4.0
    m.live_sessions(["a"], {"a": 2, "b": 1})
    m.live_sessions(["a"], {})  # b's sessions ended and b is not loaded: it falls to 0
    last = {tags["model"]: v for v, tags in points(exported, "ominix_asr_live_sessions")}
    assert last == {"a": 0, "b": 0}


def test_tts_real_time_factor_counts_until_the_last_audio(exported, monkeypatch):
    clock = iter([1.0, 3.0])
    monkeypatch.setattr("deployments.tts.metrics.time.perf_counter", lambda: next(clock))
    meter = SpeechMetrics().meter("t", characters=10, sample_rate=100, started=0.0)
    meter.audio(100)  # at 1 s: the first audio
    meter.audio(300)  # at 3 s: 4 s of audio in all
    meter.done()
    assert points(exported, "ominix_tts_time_to_first_audio_ms") == [(1000, {"model": "t"})]
    assert points(exported, "ominix_tts_real_time_factor") == [(0.75, {"model": "t"})]
    assert points(exported, "ominix_tts_audio_seconds") == [(4.0, {"model": "t"})]


def test_a_synthesis_without_audio_has_no_real_time_factor(exported):
    SpeechMetrics().meter("t", characters=3, sample_rate=24000, started=0.0).done()
    assert "ominix_tts_real_time_factor" not in exported


def test_loaded_models_fall_to_zero_when_unloaded(exported):
    gauge = LoadedModelsGauge()
    gauge.sample(["a", "b"])
    gauge.sample(["b"])
    last = {tags["model"]: v for v, tags in points(exported, "ominix_model_loaded")}
    assert last == {"a": 0, "b": 1}


def test_replica_memory_by_kind(exported):
    record_memory({"mlx_active_bytes": 5, "mlx_cache_bytes": 2, "max_rss_bytes": 9, "rss_bytes": 7})
    assert points(exported, REPLICA_METRICS["memory_bytes"].name) == [
        (5, {"kind": "mlx_active"}),
        (2, {"kind": "mlx_cache"}),
        (7, {"kind": "rss"}),
    ]


def test_one_metric_object_per_name_per_process(exported):
    GenerationMetrics().first_token("a", 0.1)
    GenerationMetrics().first_token("b", 0.1)  # a second replica class instance, same process
    assert len(points(exported, "ominix_llm_time_to_first_token_ms")) == 2


def test_a_metric_ray_refuses_is_logged_once_and_never_fails_a_request(monkeypatch, caplog):
    def refuse(spec):
        raise ValueError("no")

    monkeypatch.setattr(ray_metrics, "_objects", {})
    monkeypatch.setattr(ray_metrics, "_refused", set())
    monkeypatch.setattr(ray_metrics, "ray_is_initialized", lambda: True)
    monkeypatch.setattr(ray_metrics, "_create", refuse)
    m = GenerationMetrics()
    with caplog.at_level(logging.WARNING, logger="ray.serve"):
        m.first_token("m", 0.1)
        m.first_token("m", 0.2)
    assert [r.getMessage() for r in caplog.records].count(
        "Metric ominix_llm_time_to_first_token_ms is not exported: ValueError: no"
    ) == 1
    assert m.summary("m")["ttft_count"] == 2  # the JSON totals still count


def test_every_metric_is_named_for_prometheus_and_declares_its_tags():
    names = [spec.name for spec in ALL_METRICS]
    assert len(names) == len(set(names))
    for spec in ALL_METRICS:
        assert re.fullmatch(r"ominix_[a-z0-9_]+", spec.name), spec.name
        assert spec.kind in ("counter", "gauge", "histogram")
        # Ray Serve adds these itself from the replica's context (ray/serve/metrics.py).
        assert not {"deployment", "replica", "application"} & set(spec.tags)
        if spec.kind == "histogram":
            assert list(spec.boundaries) == sorted(set(spec.boundaries)) and spec.boundaries[0] > 0


def test_the_llm_engine_counts_running_and_queued_sequences():
    from deployments.llm.engine import EngineConfig, LLMEngine

    engine = LLMEngine("m", Path("."), EngineConfig(max_batch_size=2))
    engine.stats["running"] = 5  # 5 admitted, the batch decodes 2
    engine._inbox.put(object())  # one request not admitted yet
    assert engine.sequence_counts() == (2, 4)
    engine.stats["running"] = 1
    engine._inbox.get()
    assert engine.sequence_counts() == (1, 0)


class FakeEngine:
    def __init__(self, model_id: str, running: int, queued: int):
        self.model_id, self.counts = model_id, (running, queued)

    def sequence_counts(self):
        return self.counts


class FakeAdapter:
    def __init__(self, name: str, base: str):
        self.model_id, self.base = name, base


class FakeModels:
    def __init__(self, engines, adapters=()):
        self._engines, self._adapters = engines, list(adapters)

    def engines(self):
        return self._engines

    def adapters(self):
        return self._adapters

    def loaded(self):
        return [e.model_id for e in [*self._engines, *self._adapters]]


def test_an_llm_replica_samples_its_models_memory_and_sequences(exported):
    from deployments.llm.deployment import LLMSlot

    replica = object.__new__(LLMSlot.func_or_class)  # what SlotReplica.__init__ sets, without Serve
    replica.metrics, replica._loaded_gauge = GenerationMetrics(), LoadedModelsGauge()
    adapters = [FakeAdapter("pirate", "a"), FakeAdapter("poet", "a")]
    replica.models = FakeModels([FakeEngine("a", 3, 1), FakeEngine("b", 0, 0)], adapters)
    replica.sample_replica_gauges()
    loaded = {tags["model"]: v for v, tags in points(exported, "ominix_model_loaded")}
    assert loaded == {"a": 1, "b": 1, "pirate": 1, "poet": 1}
    assert points(exported, "ominix_llm_adapters_loaded") == [(2, {"model": "a"})]
    kinds = {tags["kind"] for _, tags in points(exported, "ominix_replica_memory_bytes")}
    assert {"mlx_active", "mlx_cache"} <= kinds
    assert points(exported, "ominix_llm_running_sequences") == [(3, {"model": "a"}), (0, {"model": "b"})]
    assert points(exported, "ominix_llm_queued_sequences") == [(1, {"model": "a"}), (0, {"model": "b"})]


def test_a_failing_sample_never_raises(exported, caplog):
    from deployments.llm.deployment import LLMSlot

    class Broken(FakeModels):
        def loaded(self):
            raise RuntimeError("engine gone")

    replica = object.__new__(LLMSlot.func_or_class)
    replica.metrics, replica._loaded_gauge, replica.models = GenerationMetrics(), LoadedModelsGauge(), Broken([])
    with caplog.at_level(logging.DEBUG, logger="ray.serve"):
        replica.sample_replica_gauges()
    assert "Sampling the llm slot's gauges failed" in caplog.text
